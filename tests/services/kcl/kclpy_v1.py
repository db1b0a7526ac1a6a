"""A record processor on amazon-kclpy 1.x's own API (``amazon_kclpy.kcl.RecordProcessorBase``
and ``KCLProcess``, which 1.0 to 1.5.1 all have), for the older protocol:

``kclpy_v1.py OUTPUT``: appends each record to OUTPUT once (``<seq> <data>`` lines),
checkpoints after each batch and at ``shutdown`` TERMINATE, and at ``shutdown`` ZOMBIE says
so on stderr and tries to checkpoint anyway, saying how kclpy reported the answer.
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

from amazon_kclpy import kcl


class Processor(kcl.RecordProcessorBase):
    def __init__(self, output: str) -> None:
        self.done = -1
        if os.path.exists(output):
            with open(output) as f:
                for line in f:
                    self.done = int(line.split(" ", 1)[0])
        self.fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def initialize(self, shard_id: str) -> None:
        sys.stderr.write(f"kclpy v1 processor: shard {shard_id}\n")

    def process_records(self, records: Any, checkpointer: Any) -> None:
        for r in records:  # dicts in 1.3.1, Records (read by key too) in 1.5.1
            seq = int(r["sequenceNumber"])
            if seq > self.done:
                data = base64.b64decode(r["data"]).decode().rstrip("\n")
                os.write(self.fd, f"{seq} {data}\n".encode())
                self.done = seq
        checkpointer.checkpoint(records[-1]["sequenceNumber"])

    def shutdown(self, checkpointer: Any, reason: str) -> None:
        if reason == "TERMINATE":
            checkpointer.checkpoint()
            sys.stderr.write(f"kclpy v1 processor: terminated at {self.done}\n")
            return
        sys.stderr.write(f"kclpy v1 processor: shutdown {reason}\n")
        try:
            checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            sys.stderr.write(f"kclpy v1 processor: checkpoint refused: {e}\n")


if __name__ == "__main__":
    kcl.KCLProcess(Processor(sys.argv[1])).run()
