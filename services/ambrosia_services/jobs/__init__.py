"""The job protocol between the coordinator immortal (initiator) and job runners
(participants), sans-IO: messages and their byte layout, a connection per link, and a job
table for each role. See README.md in this directory for the layout and the state tables."""

from ambrosia_core.wire import NEED_DATA, NeedData

from ._state import (
    HELD_STATES,
    INITIATOR_BATCH,
    INITIATOR_TRANSITIONS,
    LINK_MESSAGES,
    PARTICIPANT_BATCH,
    PARTICIPANT_TRANSITIONS,
    Disposition,
    InitiatorInput,
    InitiatorState,
    JobInput,
    JobState,
    Role,
)
from .codec import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, decode_body, encode
from .connection import DEFAULT_INITIAL_CREDITS, ConnectionState, JobConnection
from .effects import (
    Deliver,
    Discarded,
    HeldJobs,
    JobCancelled,
    JobDone,
    JobEffect,
    JobStarted,
    Released,
    Retained,
    Send,
)
from .errors import (
    BatchOrderError,
    CreditExceededError,
    DataAfterLastError,
    IllegalJobTransitionError,
    JobFrameTooLargeError,
    JobLocalError,
    JobMessageDirectionError,
    JobProtocolError,
    JobRemoteError,
    JobWireError,
    RetentionLimitError,
    UnexpectedJobMessageError,
    UnknownJobMessageTypeError,
)
from .initiator import RESULT_EDGE, InitiatorJobs, JobRecord
from .messages import (
    Batch,
    Cancel,
    Check,
    CheckResponse,
    FlowControl,
    JobId,
    JobMessage,
    MessageType,
    Start,
)
from .participant import ParticipantJobs

__all__ = [
    # messages and their bytes
    "JobId",
    "Start",
    "Cancel",
    "Batch",
    "FlowControl",
    "Check",
    "CheckResponse",
    "JobMessage",
    "MessageType",
    "encode",
    "decode_body",
    "FrameDecoder",
    "DEFAULT_MAX_FRAME_SIZE",
    "NEED_DATA",
    "NeedData",
    # one link
    "JobConnection",
    "ConnectionState",
    "DEFAULT_INITIAL_CREDITS",
    "Role",
    "LINK_MESSAGES",
    # job tables
    "ParticipantJobs",
    "InitiatorJobs",
    "JobRecord",
    "RESULT_EDGE",
    "JobState",
    "JobInput",
    "InitiatorState",
    "InitiatorInput",
    "Disposition",
    "PARTICIPANT_TRANSITIONS",
    "PARTICIPANT_BATCH",
    "HELD_STATES",
    "INITIATOR_TRANSITIONS",
    "INITIATOR_BATCH",
    # effects
    "JobEffect",
    "Send",
    "JobStarted",
    "Deliver",
    "Retained",
    "Discarded",
    "JobCancelled",
    "JobDone",
    "Released",
    "HeldJobs",
    # errors
    "JobProtocolError",
    "JobRemoteError",
    "JobWireError",
    "JobFrameTooLargeError",
    "UnknownJobMessageTypeError",
    "JobMessageDirectionError",
    "BatchOrderError",
    "DataAfterLastError",
    "CreditExceededError",
    "UnexpectedJobMessageError",
    "RetentionLimitError",
    "JobLocalError",
    "IllegalJobTransitionError",
]
