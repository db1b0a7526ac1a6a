"""A Python immortal and an AmbrosiaJS-convention peer, each with its own coordinator,
talking through the link between the coordinators: forks with JSON and raw-bytes
arguments, "post" calls and their ``<name>_Result`` answers, in both directions."""

from __future__ import annotations

import json

import pytest

from ambrosia_py.testing import repro

from .apps import PyService
from .conftest import Interop
from .jspeer import FORK, POST, JsStylePeer, zz32

pytestmark = pytest.mark.integration

PY = "tests.interop.apps:PyService"


def _boom(why: str) -> None:
    raise ValueError(why)


def _peer(interop: Interop) -> JsStylePeer:
    return interop.start_peer("js", double=lambda x: 2 * x, boom=_boom)


def test_json_and_raw_forks_from_the_peer_reach_python_state(interop: Interop) -> None:
    peer = _peer(interop)
    assert peer.initial_echo == b"2.0.1"
    py = interop.start_immortal(PY, "py")
    peer.fork("py", 8, {"greeting": "from JS", "n": 3})
    peer.fork("py", 9, b"\x00\x01raw")
    peer.fork("py", 8, {"greeting": "héllo again", "n": 4})
    assert "[b'\\x00\\x01raw']" in py.wait_for("blobs now")
    line = py.wait_for("greetings now", count=2)
    assert "[['from JS', 3], ['héllo again', 4]]" in line
    py.stop()
    state = repro("py", PyService, home=interop.home).state
    assert state.greetings == [["from JS", 3], ["héllo again", 4]]
    assert state.blobs == [b"\x00\x01raw"]


def test_post_calls_from_the_peer_get_their_result_or_error(interop: Interop) -> None:
    peer = _peer(interop)
    py = interop.start_immortal(PY, "py")
    add = peer.post("py", "add", a=2, b=40)
    div = peer.post("py", "divide", a=1, b=0)
    nope = peer.post("py", "no_such_method", a=1)
    typed = peer.post("py", "describe", point={"x": 1, "y": 2})
    mistyped = peer.post("py", "describe", point={"x": "one"})
    ok = peer.result(add)
    assert ok == {"senderInstanceName": "py", "destinationInstanceName": "js",
                  "methodName": "add_Result", "methodVersion": 1, "callID": add,
                  "result": 42}
    failed = peer.result(div)
    assert failed["methodName"] == "divide_Result" and failed["callID"] == div
    assert "result" not in failed
    assert failed["errorMsg"] == "ZeroDivisionError: division by zero"
    # The callee logs it too, with its traceback: waited for to its last line, which the
    # reader of the callee's output may not have reached when it hands out the first.
    logged = py.wait_for(f"divide failed (posted by js, call {div}")
    assert logged.endswith(f"divide failed (posted by js, call {div}; the caller gets its "
                           "errorMsg)")
    py.wait_for("ZeroDivisionError: division by zero")
    after = py.lines[py.lines.index(logged) + 1:]
    assert after[0] == "Traceback (most recent call last):"
    assert "ZeroDivisionError: division by zero" in after[:12]
    unknown = peer.result(nope)
    assert unknown["methodName"] == "no_such_method_Result" and "no_such_method" in (
        unknown["errorMsg"])
    # JSON arguments arrive as the parameters' annotated types.
    assert peer.result(typed)["result"] == "Point(x=1, y=2)"
    assert peer.result(mistyped)["errorMsg"].startswith("SerializationError: ")
    # As the peer received them: Forks to method -1 whose arguments are JSON.
    for rpc in peer.rpcs_to(POST):
        assert rpc.raw[:5] == b"\x00\x00" + zz32(-1) + bytes([FORK]) + b"{"
    assert [r.json()["callID"] for r in peer.rpcs_to(POST)] == [add, div, nope, typed,
                                                                mistyped]


def test_python_calls_the_peer_through_the_js_proxy(interop: Interop) -> None:
    peer = _peer(interop)
    py = interop.start_immortal(PY, "py")
    peer.fork("py", 10, {"x": 21})
    line = py.wait_for("js replies")
    assert "[42, 'error: Error: boom failed: testing']" in line
    # Exactly the bytes AmbrosiaJS would receive: [0x00][zz32 method][rpc type][args].
    (js_fork,) = peer.rpcs_to(20)
    assert js_fork.raw == (b"\x00\x00" + zz32(20) + b"\x01"
                           + '{"text":"héllo","n":21}'.encode())
    (raw_fork,) = peer.rpcs_to(21)
    assert raw_fork.raw == b"\x00\x00" + zz32(21) + b"\x01" + b"\xff\x00\xff\x7b\x01"
    assert zz32(21) == b"\x2a" and zz32(-1) == b"\x01"
    posts = [r for r in peer.rpcs_to(POST) if not r.json()["methodName"].endswith("_Result")]
    assert [r.raw[:5] for r in posts] == [b"\x00\x00\x01\x01{"] * 2
    double, boom = (p.json() for p in posts)
    assert double == {"senderInstanceName": "py", "destinationInstanceName": "js",
                      "methodName": "double", "methodVersion": 1,
                      "callID": double["callID"], "arg:x": 21}
    assert boom["methodName"] == "boom" and boom["arg:why"] == "testing"
    assert isinstance(double["callID"], int) and boom["callID"] != double["callID"]
    assert json.loads(posts[0].args) == double


def test_optional_parameters_arrive_with_or_without_the_question_mark(
        interop: Interop) -> None:
    peer = _peer(interop)
    py = interop.start_immortal(PY, "py")
    optional = peer.post("py", "scale", x=3, **{"factor?": 5})  # as AmbrosiaJS names it
    plain = peer.post("py", "scale", x=3, factor=7)
    omitted = peer.post("py", "scale", x=3)
    twice = peer.post("py", "scale", x=3, factor=7, **{"factor?": 5})
    assert peer.result(optional)["result"] == 15
    assert peer.result(plain)["result"] == 21
    assert peer.result(omitted)["result"] == 6
    assert peer.result(twice)["errorMsg"] == (
        "SerializationError: the post call gives argument 'factor' twice "
        "(arg:factor and arg:factor?)")
    # A JSON fork's argument names may carry the mark too.
    peer.fork("py", 8, {"greeting": "optional", "n?": 5})
    assert "[['optional', 5]]" in py.wait_for("greetings now")


def test_void_results_cross_as_ambrosiajs_undefined_placeholder_both_ways(
        interop: Interop) -> None:
    peer = interop.start_peer("js", forget=lambda what: "__UNDEFINED__")
    py = interop.start_immortal(PY, "py")
    void = peer.post("py", "remember", text="hi")
    null = peer.post("py", "lookup", key="k")
    # A void Python method answers as a void JS method does: result "__UNDEFINED__".
    peer.result(void)
    (void_rpc,) = [r for r in peer.rpcs_to(POST)
                   if r.json()["methodName"] == "remember_Result"]
    assert void_rpc.args == (
        '{"senderInstanceName":"py","destinationInstanceName":"js",'
        f'"methodName":"remember_Result","methodVersion":1,"callID":{void},'
        '"result":"__UNDEFINED__"}').encode()
    # None from a method declared to return a value stays JSON null.
    assert peer.result(null)["result"] is None
    (null_rpc,) = [r for r in peer.rpcs_to(POST) if r.json()["methodName"] == "lookup_Result"]
    assert null_rpc.args.endswith(b',"result":null}')
    # A void JS method's placeholder reaches Python as None.
    peer.fork("py", 11, {})
    assert py.wait_for("void reply").endswith("void reply: None")
    (forget,) = [r.json() for r in peer.rpcs_to(POST) if r.json()["methodName"] == "forget"]
    assert forget["arg:what"] == "it"
    py.stop()
    assert repro("py", PyService, home=interop.home).state.replies == [None]
