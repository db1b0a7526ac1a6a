"""The log store: log files, checkpoint files and replay digests on disk.

Layout (the real coordinator's): ``<log-dir>/<instance>_<version>/``

- ``serverlog<N>``: data records back to back, no file header. On disk a record's length
  field is stored as ``-(length)-1`` and the record is followed by watermarks that its
  length does not count::

      zz32 nInputs {zz32 len, name, int64 lastProcessedID, int64 lastProcessedReplayableID}*
      zz32 nTrims  {zz32 len, name, int64 trimSeqNo}*

  The input watermarks after a record are the whole map (sender -> last link sequence
  number logged), so the last whole record of a file says where every sender stands. A
  live log may end in zeros: its writer fills space ahead with zeros and writes records
  into it (``LogWriter``); readers take a zero tail for space not written yet. Records
  only ever go at the end, and each is self-checking, so a follower can tail a file.
- ``serverchkpt<N>``::

      "AMBRCKP2"  int32 n  n bytes of coordinator state (msgpack)
      the binding's Checkpoint message as received  the binding's raw bytes
      uint64 XXH64 (seed 0) of every byte before it

  Written to a temporary name, fsynced and renamed, so it exists only when whole. The
  check bytes are verified over the whole file before any of it is used (a binding must
  never load damaged state). ``AMBRCKP1`` files (the format before the check bytes) are
  refused by name.
- ``serverdigest<N>``: the determinism check: per binding output since checkpoint N,
  16 bytes (uint64 XXH64 of the output message, int64 seq id last delivered when it came).
- ``serverlock``: held (flock) by the coordinator writing this directory.
- ``serverseal<N>``: active/active only: int64, where log N ends (see ``replication.shared_dir``).

Checkpoint N pairs with log N; replay goes on through N+1, N+2, ... After each new
checkpoint the last K (the registration's ``keep_checkpoints``) stay with every file
from the oldest of them on (``remove_unkept``), so a replay can start from any of them.
"""

from __future__ import annotations

from .checkpoint import CHECKPOINT_MAGIC, CheckpointFile, write_checkpoint
from .digest import DIGEST_ENTRY, DigestWriter, is_impulse, read_digest
from .layout import (
    CHECKPOINT_PREFIX,
    DIGEST_PREFIX,
    LOCK_NAME,
    LOG_PREFIX,
    SEAL_PREFIX,
    checkpoint_path,
    checkpoint_temps,
    digest_path,
    file_numbers,
    log_path,
    remove_checkpoint_temps,
    remove_first_start_leftovers,
    remove_uncommitted_version,
    remove_unkept,
    seal_path,
)
from .lock import InstanceLock
from .records import (
    DiskRecord,
    LogScan,
    encode_disk_record,
    scan_log,
    wire_batches,
    written_end,
)
from .seals import read_seal, write_seal
from .watermarks import EPOCH_KEY
from .writer import DEFAULT_REGION, LogWriter

__all__ = [
    "CHECKPOINT_MAGIC",
    "CHECKPOINT_PREFIX",
    "DEFAULT_REGION",
    "DIGEST_ENTRY",
    "DIGEST_PREFIX",
    "EPOCH_KEY",
    "LOCK_NAME",
    "LOG_PREFIX",
    "SEAL_PREFIX",
    "CheckpointFile",
    "DiskRecord",
    "DigestWriter",
    "InstanceLock",
    "LogScan",
    "LogWriter",
    "checkpoint_path",
    "digest_path",
    "encode_disk_record",
    "file_numbers",
    "is_impulse",
    "log_path",
    "read_digest",
    "read_seal",
    "checkpoint_temps",
    "remove_checkpoint_temps",
    "remove_first_start_leftovers",
    "remove_uncommitted_version",
    "remove_unkept",
    "scan_log",
    "seal_path",
    "wire_batches",
    "write_checkpoint",
    "write_seal",
    "written_end",
]
