"""The package's public names are pinned: adding or removing one is a reviewed change."""

from __future__ import annotations

import ambrosia_services.jobs

from ambrosia_core.errors import LocalProtocolError, RemoteProtocolError

PUBLIC = {
    # messages and their bytes
    "JobId", "Start", "Cancel", "Batch", "FlowControl", "Check", "CheckResponse",
    "JobMessage", "MessageType", "encode", "decode_body", "FrameDecoder",
    "DEFAULT_MAX_FRAME_SIZE", "NEED_DATA", "NeedData",
    # one link
    "JobConnection", "ConnectionState", "DEFAULT_INITIAL_CREDITS", "Role", "LINK_MESSAGES",
    # job tables
    "ParticipantJobs", "InitiatorJobs", "JobRecord", "RESULT_EDGE", "JobState", "JobInput",
    "InitiatorState", "InitiatorInput", "Disposition", "PARTICIPANT_TRANSITIONS",
    "PARTICIPANT_BATCH", "HELD_STATES", "INITIATOR_TRANSITIONS", "INITIATOR_BATCH",
    # effects
    "JobEffect", "Send", "JobStarted", "Deliver", "Retained", "Discarded", "JobCancelled",
    "JobDone", "Released", "HeldJobs",
    # errors
    "JobProtocolError", "JobRemoteError", "JobWireError", "JobFrameTooLargeError",
    "UnknownJobMessageTypeError", "JobMessageDirectionError", "BatchOrderError",
    "DataAfterLastError", "CreditExceededError", "UnexpectedJobMessageError",
    "RetentionLimitError", "JobLocalError", "IllegalJobTransitionError",
}


def test_all_is_pinned_and_every_name_exists() -> None:
    assert len(ambrosia_services.jobs.__all__) == len(set(ambrosia_services.jobs.__all__))
    assert set(ambrosia_services.jobs.__all__) == PUBLIC
    for name in ambrosia_services.jobs.__all__:
        assert getattr(ambrosia_services.jobs, name) is not None


def test_every_error_says_whose_fault_it_is() -> None:
    errors = [
        getattr(ambrosia_services.jobs, n) for n in PUBLIC
        if isinstance(getattr(ambrosia_services.jobs, n), type)
        and issubclass(getattr(ambrosia_services.jobs, n), ambrosia_services.jobs.JobProtocolError)
    ]
    assert len(errors) == 13
    for cls in errors:
        if cls is ambrosia_services.jobs.JobProtocolError:
            continue
        remote = issubclass(cls, RemoteProtocolError)
        local = issubclass(cls, LocalProtocolError)
        assert remote != local, cls.__name__
