"""AmbrosiaJS's "post" convention on the engine: a Fork to method -1 whose JSON names the
method and the call id, answered by a ``<name>_Result`` post (the body's layout is in
``jsconv``)."""

from __future__ import annotations

from typing import Any

from ambrosia_core.wire import RpcType
from ambrosia_py.errors import RemoteCallError, SerializationError, UnknownMethodError

from .. import serialization as ser
from ..methods import POST_METHOD_ID, PendingCall
from . import jsconv, replaylog
from .core import EngineCore
from .stepping import Done

__all__ = ["JsPosts"]


class JsPosts(EngineCore):
    """The engine's posts room (a part of ``Engine``)."""

    def _apply_post(self, args: bytes) -> None:
        self._enter_derived(args)
        try:
            obj = ser.decode_json_args(args)
            name = obj["methodName"]
            call_id = obj.get("callID", -1)
        except (SerializationError, KeyError) as e:
            self.handlers.log_failure(None, SerializationError(f"malformed post call: {e}"))
            return
        spec = self.cls.__ambrosia_methods__.get(name)
        if spec is None and isinstance(name, str) and name.endswith("_Result"):
            pc = self.handlers.take(call_id)
            if pc is None:
                self.stray_result(call_id, "post result")
                return
            if "errorMsg" in obj:
                pc.resolve(error=RemoteCallError(str(obj["errorMsg"]), "Error"))
            else:
                pc.resolve(jsconv.post_result(obj))
            self.handlers.resume(pc)
            return
        sender = obj.get("senderInstanceName", "")
        on_done: Done = self.handlers.log_failure
        if obj.get("resultRequired", True) and sender:
            on_done = self._post_result_sender(sender, name, call_id,
                                               spec.return_type if spec else None)
        if spec is None:
            on_done(None, UnknownMethodError(f"{self.cls.__qualname__} publishes no method "
                                             f"{name!r}"))
            return
        try:
            kwargs = self._load_json_kwargs(spec, jsconv.post_kwargs(obj))
        except SerializationError as e:
            on_done(None, e)
            return
        self.handlers.start(getattr(self.instance, spec.name), (), kwargs, spec.name, on_done)

    def _post_result_sender(self, sender: str, name: str, call_id: Any, return_type: Any
                            ) -> Done:
        def send(value: Any, error: BaseException | None) -> None:
            body = jsconv.result_body(self.instance_name, sender, name, call_id)
            if error is None:
                try:
                    body["result"] = jsconv.result_value(value, self.serializer.dump(value),
                                                         return_type)
                    data = ser.encode_json_args(body)
                except SerializationError as e:
                    error = e
            if error is not None:
                replaylog.log_rpc_failure(self.user_log, name, sender, call_id, error,
                                          posted=True)
                body.pop("result", None)
                body["errorMsg"] = f"{type(error).__name__}: {error}"
                data = ser.encode_json_args(body)
            self._send(sender, POST_METHOD_ID, RpcType.FORK, data)

        return send

    def post(self, dest: str, method_name: str, args: dict[str, Any]) -> PendingCall[Any]:
        self._require_handler(f"posting {method_name}")
        call_id = self._next_call_id
        self._next_call_id += 1
        body = jsconv.call_body(self.instance_name, dest, method_name, call_id,
                                {k: self.serializer.dump(v) for k, v in args.items()})
        pc: PendingCall[Any] = PendingCall(call_id, method_name)
        self.handlers.add(pc)
        self._send(dest, POST_METHOD_ID, RpcType.FORK, ser.encode_json_args(body))
        return pc
