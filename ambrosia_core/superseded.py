"""The notice a replica's coordinator gives its binding when a newer primary superseded it.

A binding connects to its coordinator's receive port (binding -> coordinator) and send
port (coordinator -> binding). The coordinator never writes on the receive connection,
except this once: a replica that finds itself fenced by a newer epoch writes
``SUPERSEDED`` there and closes its half of that connection, closes the send connection,
reads and drops what the binding still sends until the binding closes its end (a few
seconds at most), and starts over as a standby on the same ports. Its binding's state
went past what was committed, so the binding must start over too, from the checkpoint
and the log the standby sends.

A binding that never reads its receive connection (any other language's) sees only the
close, as when its coordinator stops, and is restarted by whoever supervises it; this
package's runtime (``ambrosia run --receive-port P --send-port Q``) reads the
notice and starts afresh by itself. A coordinator that stops or dies writes nothing
there, so a standalone instance's binding ends exactly as before.
"""

from __future__ import annotations

__all__ = ["SUPERSEDED"]

SUPERSEDED = b"AMBROSIA-SUPERSEDED\n"
