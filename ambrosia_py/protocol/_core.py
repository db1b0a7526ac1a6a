"""The state every part of ``BindingConnection`` shares, and the one way to change it.

``_receive`` applies an input from the coordinator and breaks the connection on a missing
table entry; ``_do`` applies a local intent after ``_refuse_if_illegal``, which leaves
everything unchanged when it refuses. The receive side (``_receive_side``) and the send
side (``_send_side``) build on this.
"""

from __future__ import annotations

from collections import deque

from ambrosia_core.errors import LocalProtocolError, UnexpectedMessageError
from ambrosia_core.wire import LogRecordDecoder
from ambrosia_core.wire.stream import DEFAULT_MAX_FRAME_SIZE
from ambrosia_py.errors import ImpulseDuringRecoveryError

from . import events as ev
from ._state import CHECKPOINT_OWED, REPLAYING_STATES, TRANSITIONS, State, Trigger

__all__ = ["ConnectionCore"]


class ConnectionCore:
    """The connection's state, its properties and its transitions (see ``BindingConnection``)."""

    def __init__(
        self,
        instance_name: str = "",
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        verify_checksums: bool = True,
    ) -> None:
        self.instance_name = instance_name
        self._decoder = LogRecordDecoder(
            max_frame_size=max_frame_size, verify_checksums=verify_checksums
        )
        self._state = State.START
        self._pending: deque[tuple[object, int]] = deque()  # (message, record seq id)
        self._out_events: deque[ev.ProtocolEvent] = deque()
        self._attached: set[str] = set()
        self._ckpt_to_send = -1  # bytes still owed of a checkpoint being sent
        self._ckpt_reason: ev.CheckpointReason | None = None
        self._recovered = False  # went through a checkpoint load in this life
        self._upgraded = False
        self.messages_replayed = 0
        self.last_seq_id: int | None = None
        self.committer_id: int | None = None

    # ------------------------------------------------------------ properties
    @property
    def state(self) -> State:
        return self._state

    @property
    def is_primary(self) -> bool:
        """True once the instance has become primary (Impulses are legal)."""
        return self._state in (State.PRIMARY, State.PRIMARY_CHECKPOINT)

    @property
    def is_replaying(self) -> bool:
        """True while recovering: inputs are replays of an earlier life's."""
        return self._state in REPLAYING_STATES

    @property
    def owes_checkpoint(self) -> bool:
        return self._state in CHECKPOINT_OWED

    @property
    def upgraded(self) -> bool:
        """True once an UpgradeTakeCheckpoint or UpgradeService switched versions."""
        return self._upgraded

    # ------------------------------------------------------------ transitions
    def _receive(self, inp: Trigger, what: str, seq_id: int) -> State:
        """Apply an input from the coordinator; a missing table entry breaks the connection."""
        state = self._state
        nxt = TRANSITIONS[state].get(inp)
        if nxt is None:
            self._state = State.ERROR
            raise UnexpectedMessageError(
                f"coordinator protocol violation: {inp.value} ({what}) while the binding "
                f"is in state {state.name} ({state.value})",
                seq_id=seq_id if seq_id >= 0 else self.last_seq_id,
            )
        self._state = nxt
        return nxt

    def _refuse_if_illegal(self, inp: Trigger, what: str = "") -> None:
        """Raise if the binding may not do ``inp`` now. A refused intent emits no bytes and
        leaves the state unchanged, so the connection stays usable."""
        state = self._state
        if inp in TRANSITIONS[state]:
            return
        if state is State.ERROR:
            raise LocalProtocolError("the connection is broken by an earlier protocol error")
        detail = f" ({what})" if what else ""
        if inp is Trigger.SEND_IMPULSE and not self.is_primary:
            raise ImpulseDuringRecoveryError(
                f"an Impulse{detail} cannot be sent before the instance is primary "
                f"(state {state.name}: {state.value})"
            )
        raise LocalProtocolError(
            f"cannot {inp.value}{detail} in state {state.name} ({state.value})"
        )

    def _do(self, inp: Trigger, what: str = "") -> State:
        """Apply a local intent (checked first with ``_refuse_if_illegal``)."""
        self._refuse_if_illegal(inp, what)
        self._state = TRANSITIONS[self._state][inp]
        return self._state
