"""Record processors for the tests, speaking the protocol by hand (no amazon-kclpy):

``children.py unruly MARKS``: the current protocol, misbehaving differently in each life
(MARKS is a directory counting them): the first life sends lines that are no messages and
checkpoints it may not take, then a status for the wrong action; the second never
answers a batch; later lives behave, checkpointing each batch.

``children.py crashes WIDTH``: a traceback and a WIDTH-character line on stderr, then an
exit before answering ``initialize``, at every start.

``children.py dies STARTS CRASHES``: the current protocol; each life appends the time it
started to STARTS; the first CRASHES lives process one batch (answered, not
checkpointed), then write a 30-line traceback and exit; later lives say so in one line and
checkpoint each batch and the stream's end.

``children.py talks LONG TAIL``: the current protocol, checkpointing each batch; before it
answers ``initialize`` it writes to stderr, at once, a line of LONG "a"s and then TAIL
"b"s with no newline, and stays (it writes nothing more there).

``children.py ends UPTO``: either protocol, checkpointing each batch up to sequence
number UPTO (later ones are held, not recorded); at the end of
primacy (leaseLost, shutdownRequested, shutdown ZOMBIE) it says on stderr which end it
got, then asks for a checkpoint anyway, to show the answer.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def say(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def ask(sequence: Any, key: str) -> dict[str, Any]:
    say({"action": "checkpoint", key: sequence})
    answer = json.loads(sys.stdin.readline())
    sys.stderr.write(f"test child: checkpoint {sequence!r} answered {answer.get('error', 'ok')}"
                     f"\n")
    return dict(answer)


def unruly(marks: str) -> None:
    os.makedirs(marks, exist_ok=True)
    life = len(os.listdir(marks)) + 1
    open(os.path.join(marks, str(life)), "w").close()
    for line in sys.stdin:
        msg = json.loads(line)
        action = msg["action"]
        if action == "processRecords" and life == 1:
            sys.stdout.write("a line that is no JSON\n\n[1, 2]\n")
            say({"action": "dance"})
            ask("999999", "sequenceNumber")  # beyond what was delivered
            ask("twelve", "sequenceNumber")  # not a sequence number
            say({"action": "status", "responseFor": "initialize"})  # the wrong action
            sys.stdin.readline()  # killed while waiting
        if action == "processRecords" and life == 2:
            sys.stdin.readline()  # never answers: killed after the timeout
        if action == "initialize" and life == 3:
            ask("1", "sequenceNumber")  # not while initialize runs
        if action == "processRecords":
            ask(msg["records"][-1]["sequenceNumber"], "sequenceNumber")
        if action == "shardEnded":
            ask(None, "sequenceNumber")
        say({"action": "status", "responseFor": action})


def ends(upto: str) -> None:
    last: Any = None
    key = "sequenceNumber"
    for line in sys.stdin:
        msg = json.loads(line)
        action = msg["action"]
        if action == "processRecords":
            last = msg["records"][-1]["sequenceNumber"]
            if int(last) <= int(upto):
                ask(last, key)
            else:
                sys.stderr.write(f"test child: holding {last}\n")
        elif action == "shardEnded" or msg.get("reason") == "TERMINATE":
            ask(None, key)
        elif action != "initialize":  # the end of primacy: say which, then checkpoint anyway
            sys.stderr.write(f"test child: {action} {msg.get('reason', '')}".rstrip() + "\n")
            ask(last, key)
        say({"action": "status", "responseFor": action})


def dies(starts: str, crashes: str) -> None:
    with open(starts, "a") as f:
        f.write(f"{time.time()!r}\n")
    with open(starts) as f:
        life = len(f.readlines())
    for line in sys.stdin:
        msg = json.loads(line)
        action = msg["action"]
        if life > int(crashes):
            if action == "initialize":
                sys.stderr.write(f"test child: life {life} behaves\n")
            elif action == "processRecords":
                ask(msg["records"][-1]["sequenceNumber"], "sequenceNumber")
            elif action == "shardEnded":
                ask(None, "sequenceNumber")
        say({"action": "status", "responseFor": action})
        if action == "processRecords" and life <= int(crashes):
            frames = "".join(f'  File "child.py", line {i}, in step{i}\n    step{i + 1}()\n'
                             for i in range(14))
            sys.stderr.write(f"Traceback (most recent call last):\n{frames}"
                             "RuntimeError: died after a batch\n")
            sys.exit(1)


def talks(long: str, tail: str) -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        action = msg["action"]
        if action == "initialize":
            sys.stderr.write("a" * int(long) + "\n" + "b" * int(tail))
            sys.stderr.flush()
        elif action == "processRecords":  # nothing more on stderr
            say({"action": "checkpoint", "sequenceNumber": msg["records"][-1]["sequenceNumber"]})
            sys.stdin.readline()
        say({"action": "status", "responseFor": action})


def crashes(width: str) -> None:
    """Writes a traceback (indented lines) and one line of ``width`` characters in a single
    write to stderr, then exits before answering ``initialize``: at every start."""
    long_line = "x" * int(width)
    sys.stderr.write("Traceback (most recent call last):\n  File \"child.py\", line 1\n"
                     f"    boom()\nRuntimeError: crashes at start\n{long_line}\n")
    sys.stderr.flush()
    sys.exit(5)


if __name__ == "__main__":
    modes: dict[str, Callable[..., None]] = {"unruly": unruly, "ends": ends,
                                             "crashes": crashes, "dies": dies,
                                             "talks": talks}
    modes[sys.argv[1]](*sys.argv[2:])
