"""Record processors for the tests, speaking the protocol by hand (no amazon-kclpy):

``children.py old OUTPUT``: the older protocol, strictly as its document has it (it exits
with a line on stderr at any field the document does not name), appending each record to
OUTPUT once (``<seq> <data>`` lines) and checkpointing after each batch and at TERMINATE.

``children.py unruly MARKS``: the current protocol, misbehaving differently in each life
(MARKS is a directory counting them): the first life sends lines that are no messages and
checkpoints it may not take, then a status for the wrong action; the second never
answers a batch; later lives behave, checkpointing each batch.

``children.py crashes WIDTH``: a traceback and a WIDTH-character line on stderr, then an
exit before answering ``initialize``, at every start.

``children.py ends UPTO``: either protocol (as ``initialize`` shows), checkpointing each
batch up to sequence number UPTO (later ones are held, not recorded); at the end of
primacy (leaseLost, shutdownRequested, shutdown ZOMBIE) it says on stderr which end it
got, then asks for a checkpoint anyway, to show the answer.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

OLD_FIELDS = {"initialize": {"action", "shardId"}, "processRecords": {"action", "records"},
              "shutdown": {"action", "reason"}}
OLD_RECORD = {"data", "partitionKey", "sequenceNumber"}


def say(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(why: str) -> None:
    sys.stderr.write(f"test child: {why}\n")
    sys.exit(3)


def ask(sequence: Any, key: str) -> dict[str, Any]:
    say({"action": "checkpoint", key: sequence})
    answer = json.loads(sys.stdin.readline())
    sys.stderr.write(f"test child: checkpoint {sequence!r} answered {answer.get('error', 'ok')}"
                     f"\n")
    return dict(answer)


def old(output: str) -> None:
    import base64
    done = -1
    if os.path.exists(output):
        with open(output) as f:
            for line in f:
                done = int(line.split(" ", 1)[0])
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for line in sys.stdin:
        msg = json.loads(line)
        action = msg["action"]
        if set(msg) != OLD_FIELDS.get(action, set()):
            fail(f"fields {sorted(msg)} in {action}")
        if action == "processRecords":
            for r in msg["records"]:
                if set(r) != OLD_RECORD:
                    fail(f"record fields {sorted(r)}")
                seq = int(r["sequenceNumber"])
                if seq > done:
                    data = base64.b64decode(r["data"]).decode().rstrip("\n")
                    os.write(fd, f"{seq} {data}\n".encode())
                    done = seq
            answer = ask(msg["records"][-1]["sequenceNumber"], "checkpoint")
            if set(answer) != {"action", "checkpoint"}:
                fail(f"answer {answer}")
        elif action == "shutdown" and msg["reason"] == "TERMINATE":
            answer = ask(None, "checkpoint")
            if "error" in answer:
                fail(f"answer {answer}")
            sys.stderr.write(f"test child: terminated at {done}\n")
        say({"action": "status", "responseFor": action})


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
    current = False
    last: Any = None
    for line in sys.stdin:
        msg = json.loads(line)
        action = msg["action"]
        key = "sequenceNumber" if current else "checkpoint"
        if action == "initialize":
            current = "sequenceNumber" in msg
        elif action == "processRecords":
            last = msg["records"][-1]["sequenceNumber"]
            if int(last) <= int(upto):
                ask(last, key)
            else:
                sys.stderr.write(f"test child: holding {last}\n")
        elif action == "shardEnded" or msg.get("reason") == "TERMINATE":
            ask(None, key)
        else:  # the end of primacy: say which, then try to checkpoint anyway
            sys.stderr.write(f"test child: {action} {msg.get('reason', '')}".rstrip() + "\n")
            ask(last, key)
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
    {"old": old, "unruly": unruly, "ends": ends, "crashes": crashes}[sys.argv[1]](sys.argv[2])
