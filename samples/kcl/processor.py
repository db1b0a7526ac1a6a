"""A record processor written against amazon-kclpy's own API, as one written for Kinesis
would be, which applies each record exactly once to a file.

Run as a child of ``ambrosia_services.kcl:KclCoordinator`` (see the README beside this file):
``python processor.py OUTPUT [--delay SECONDS]``. Each record becomes one line of OUTPUT,
``<sequence number> <data as a JSON string>``, written with one ``write``. The sequence
number makes it exactly once: at ``initialize`` the processor reads the last sequence
number in OUTPUT and skips records at or below it, so records delivered again after a
crash (everything after the last checkpoint) are not written twice. It checkpoints after
each batch and at the end of the stream.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


class ExactlyOnceFile(processor.RecordProcessorBase):
    def __init__(self, path: str, delay: float) -> None:
        self.path = path
        self.delay = delay
        self.done = -1  # the last sequence number in the file
        self.fd = -1

    def initialize(self, initialize_input: Any) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        with open(self.path, "rb") as f:
            data = f.read()
        keep = data.rfind(b"\n") + 1  # a torn last line (none is expected) is dropped
        os.truncate(self.path, keep)
        lines = data[:keep].splitlines()
        self.done = int(lines[-1].split(b" ", 1)[0]) if lines else -1
        sys.stderr.write(f"processor: shard {initialize_input.shard_id} from checkpoint "
                         f"{initialize_input.sequence_number}, file done to {self.done}\n")

    def process_records(self, process_records_input: Any) -> None:
        for record in process_records_input.records:
            seq = int(record.sequence_number)
            if seq <= self.done:
                continue
            text = record.binary_data.decode("utf-8", "replace")
            os.write(self.fd, f"{seq} {json.dumps(text)}\n".encode())
            self.done = seq
            time.sleep(self.delay)
        last = process_records_input.records[-1]
        self.checkpoint(process_records_input.checkpointer, last.sequence_number)

    def checkpoint(self, checkpointer: Any, sequence_number: str | None = None) -> None:
        try:
            checkpointer.checkpoint(sequence_number)
        except kcl.CheckpointError as e:
            # ShutdownException: the instance is stopping or lost the stream; the records
            # after the last checkpoint come again and are skipped by sequence number.
            sys.stderr.write(f"processor: checkpoint not taken: {e.value}\n")

    def lease_lost(self, lease_lost_input: Any) -> None:
        sys.stderr.write("processor: lease lost\n")

    def shard_ended(self, shard_ended_input: Any) -> None:
        self.checkpoint(shard_ended_input.checkpointer)
        sys.stderr.write(f"processor: stream ended at {self.done}\n")

    def shutdown_requested(self, shutdown_requested_input: Any) -> None:
        self.checkpoint(shutdown_requested_input.checkpointer)


def main() -> None:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("output")
    p.add_argument("--delay", type=float, default=0.0, help="seconds to sleep per record")
    args = p.parse_args()
    kcl.KCLProcess(ExactlyOnceFile(args.output, args.delay)).run()


if __name__ == "__main__":
    main()
