"""A replica of an instance whose log lives in the cluster, as a process the tests can
``kill -9`` or pause: it follows the log as a standby until the primary is silent past
the lease, claims the next epoch, and appends requests ``0..total-1`` from where the log
stands (request k is the record ``b"req k"``), ``batch`` at a time through a group commit.

Prints ``primary <epoch> <first request>`` once it holds an epoch and ``done <n>``
at the end; exits 3 when fenced (``LockLostError``), 0 when every request is in.

    python -m tests.raft.replica_worker ADDRESS NAME REPLICA TOTAL [BATCH]
"""

from __future__ import annotations

import asyncio
import sys

from ambrosia_ic.errors import LockLostError
from ambrosia_ic.logstore.raft_store import HEARTBEAT, LEASE, RaftGroupCommit, RaftLogStore

EXIT_FENCED = 3


async def replica(address: str, name: str, number: int, total: int, batch: int) -> int:
    store = RaftLogStore(address, name, timeout=20.0)
    try:
        while True:
            await store.catch_up()
            if store.view.epoch == 0 or store.silent_for() > LEASE:
                if await store.claim({"replica": number}):
                    break
            await store.wait(HEARTBEAT)
        k = store.view.record_count
        print(f"primary {store.held} {k}", flush=True)
        group = RaftGroupCommit(store)
        try:
            while k < total:
                end = min(total, k + batch)
                await asyncio.gather(*(group.submit(b"req %d" % i) for i in range(k, end)))
                k = end
        except LockLostError as err:
            print(f"fenced: {err}", flush=True)
            return EXIT_FENCED
        finally:
            await group.close()
        print(f"done {k}", flush=True)
        return 0
    finally:
        store.close()


def main() -> int:
    address, name, number, total = sys.argv[1:5]
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    return asyncio.run(replica(address, name, int(number), int(total), batch))


if __name__ == "__main__":
    raise SystemExit(main())
