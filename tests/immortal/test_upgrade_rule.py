"""The default state conversion of a live upgrade: the identity when the next version keeps
its state as the previous one does, a clear ``UpgradeError`` when it does not, and a base
class's ``upgrade_from`` never used for a state it was not written for. Then every
shipped service, populated with work in flight, carried whole to a next version that
changes nothing but its number."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import msgpack
import pytest
from ambrosia_services.connectors import ConnectorCoordinator
from ambrosia_services.kcl import KclCoordinator
from ambrosia_services.kcl.protocol import KclRecord
from ambrosia_services.pipeline import SparkCoordinator, WordCountPipeline
from ambrosia_services.staging import SegmentWriter

from ambrosia_py import Immortal, UpgradeError, fork
from ambrosia_py.testing.inmemory import InMemoryCoordinator


# ---------------------------------------------------------------- the rule, class by class
class Book(Immortal):
    def __init__(self) -> None:
        self.names: list[str] = []

    @fork
    def sign(self, name: str) -> None:
        self.names.append(name)


class BookNext(Book):  # only code changes
    version = 1

    @fork
    def sign(self, name: str) -> None:
        self.names.append(name.title())


class BookCopy(Immortal):  # written apart, the same attributes
    version = 1

    def __init__(self) -> None:
        self.names: list[str] = []


class BookMore(Book):  # adds an attribute
    version = 1

    def __init__(self) -> None:
        super().__init__()
        self.count = 0


class BookRetyped(Immortal):  # the same name, another declared type
    version = 1

    def __init__(self) -> None:
        self.names: dict[str, int] = {}


def test_a_subclass_that_changes_only_code_keeps_the_state_as_it_is() -> None:
    old = Book()
    old.names = ["ada", "grace"]
    new = BookNext.upgrade_from(old)
    assert type(new) is BookNext and new.names == ["ada", "grace"]
    assert BookNext.upgrade_problem(Book) is None


def test_a_class_written_apart_with_the_same_attributes_keeps_them() -> None:
    old = Book()
    old.names = ["ada"]
    assert BookCopy.upgrade_from(old).names == ["ada"]
    assert BookCopy.upgrade_problem(Book) is None


def test_an_added_attribute_is_refused_by_name_before_and_at_the_upgrade() -> None:
    assert BookMore.upgrade_problem(Book) == "BookMore adds count"
    with pytest.raises(UpgradeError) as err:
        BookMore.upgrade_from(Book())
    assert str(err.value) == (
        "BookMore version 1 cannot take the state of Book version 0 as it is: BookMore adds "
        "count; define BookMore.upgrade_from(previous) to say how (return "
        "cls.keep_state(previous) if the state is in fact the same)")
    # And the other way: a next version that drops one.
    assert Book.upgrade_problem(BookMore) == "Book drops count"


def test_a_retyped_attribute_is_refused() -> None:
    assert BookRetyped.upgrade_problem(Book) == "the declared types of names differ"


def test_an_attribute_added_by_a_handler_counts_as_state() -> None:
    old = Book()
    old.extra = 3  # type: ignore[attr-defined] - set later, as a handler may
    with pytest.raises(UpgradeError, match="BookCopy drops extra"):
        BookCopy.upgrade_from(old)


class Ledger(Immortal):
    def __init__(self) -> None:
        self.entries: list[int] = []
        self._cache = "not state"

    def checkpoint_state(self) -> Any:
        return {"entries": self.entries}

    def load_state(self, state: Any) -> None:
        self.entries = list(state["entries"])


class LedgerNext(Ledger):
    version = 1


class LedgerCopy(Immortal):
    version = 1

    def __init__(self) -> None:
        self.entries: list[int] = []

    def checkpoint_state(self) -> Any:
        return {"entries": self.entries}

    def load_state(self, state: Any) -> None:
        self.entries = list(state["entries"])


class LedgerSaysSo(LedgerCopy):
    version = 2

    @classmethod
    def upgrade_from(cls, previous: Immortal) -> LedgerSaysSo:
        return cls.keep_state(previous)


def test_object_state_goes_through_checkpoint_state_and_load_state() -> None:
    old = Ledger()
    old.entries = [1, 2]
    new = LedgerNext.upgrade_from(old)
    assert new.entries == [1, 2] and new.entries is not old.entries  # load_state's copy


def test_other_checkpoint_methods_are_refused_unless_the_class_says_so() -> None:
    assert LedgerCopy.upgrade_problem(Ledger) == (
        "LedgerCopy checkpoints with LedgerCopy.checkpoint_state and LedgerCopy.load_state, "
        "Ledger with Ledger.checkpoint_state and Ledger.load_state")
    with pytest.raises(UpgradeError):
        LedgerCopy.upgrade_from(Ledger())
    old = Ledger()
    old.entries = [5]
    assert LedgerSaysSo.upgrade_problem(Ledger) is None
    assert LedgerSaysSo.upgrade_from(old).entries == [5]


def test_a_change_of_form_is_refused() -> None:
    assert Ledger.upgrade_problem(Book) == (
        "Book checkpoints its attributes, Ledger checkpoints with "
        "checkpoint_state/load_state")


class Blob(Immortal):
    def __init__(self) -> None:
        self.data = b""

    def checkpoint_producer(self) -> Iterable[bytes]:
        yield self.data[:3]
        yield self.data[3:]

    def checkpoint_consumer(self, chunks: Iterator[bytes]) -> None:
        self.data = b"".join(chunks)


class BlobNext(Blob):
    version = 1


def test_stream_state_goes_through_the_producer_and_the_consumer_in_small_chunks() -> None:
    old = Blob()
    old.data = bytes(range(256)) * 9000  # more than 1 MiB: cut into chunks of at most that
    seen: list[int] = []

    class Measured(BlobNext):
        @classmethod
        def upgrade_from(cls, previous: Immortal) -> Measured:
            return cls.keep_state(previous)  # its own consumer, the same bytes

        def checkpoint_consumer(self, chunks: Iterator[bytes]) -> None:
            parts = list(chunks)
            seen.extend(len(p) for p in parts)
            self.data = b"".join(parts)

    assert Measured.upgrade_from(old).data == old.data
    assert max(seen) == 1 << 20 and sum(seen) == len(old.data)


@attrs.define
class Point(Immortal):
    x: int = 0
    y: int = 0


@attrs.define
class PointNext(Point):
    version = 1


@attrs.define
class Point3(Point):
    version = 1
    z: int = 0


def test_attrs_state_compares_fields() -> None:
    assert PointNext.upgrade_from(Point(3, 4)) == PointNext(3, 4)
    assert Point3.upgrade_problem(Point) == "Point3 adds z"


class Base(Immortal):
    """A service base whose own conversion takes its previous version's state."""

    def __init__(self) -> None:
        self.core: dict[str, int] = {}

    @classmethod
    def upgrade_from(cls, previous: Immortal) -> Base:
        new = cls()
        new.core = {"converted": 1}
        return new


class WithTable(Base):  # adds state, says nothing of converting
    def __init__(self) -> None:
        super().__init__()
        self.table: list[int] = []

    def checkpoint_state(self) -> Any:
        return [self.core, self.table]

    def load_state(self, state: Any) -> None:
        self.core, self.table = state


class WithTableNext(WithTable):
    version = 1


class BaseNext(Base):
    version = 1


class Older(Immortal):
    def __init__(self) -> None:
        self.items: list[int] = []


def test_a_base_conversion_never_builds_a_subclass_that_changed_the_state() -> None:
    old = WithTable()
    old.core, old.table = {"a": 1}, [1, 2, 3]
    # The identity, not Base.upgrade_from, which would leave out the table.
    new = WithTableNext.upgrade_from(old)
    assert (new.core, new.table) == ({"a": 1}, [1, 2, 3])
    # From a state the base's conversion was written for, to the subclass: refused.
    with pytest.raises(UpgradeError) as err:
        WithTable.upgrade_from(Older())
    assert "(Base.upgrade_from is not used: it was written for Base's state, which " \
           "WithTable changes)" in str(err.value)


def test_a_base_conversion_serves_a_subclass_that_keeps_its_state() -> None:
    assert BaseNext.upgrade_from(Older()).core == {"converted": 1}  # the base's conversion
    old = Base()
    old.core = {"kept": 2}
    assert BaseNext.upgrade_from(old).core == {"kept": 2}  # the identity comes first


# ---------------------------------------------------------------- the shipped services
def packed(instance: Immortal) -> bytes:
    return msgpack.packb(instance.checkpoint_state(), use_bin_type=True)


def populated(cls: type[Any], config: dict[str, Any]) -> Any:
    """An instance of ``cls`` after a first start, its configuration and some messages on
    two streams, driven as logged inputs (its primary I/O never runs)."""
    loop = asyncio.new_event_loop()
    ic = InMemoryCoordinator(cls, "svc", config=config)
    ic.engine.attach(loop, lambda: None)
    ic.first_start()
    ic.deliver_self()
    if issubclass(cls, SparkCoordinator):
        ic.send("configure_jobs", {"runners": ["r1@127.0.0.1:9"], "max_attempts": 3,
                                   "batch_lines": 2, "batch_seconds": 60.0,
                                   "jobs_in_flight": 2})
    if cls.uses_staging:  # one staged block per line
        writer = SegmentWriter(tempfile.mkdtemp(), "t")
        for sid in (5, 6):
            for i in range(1, 6 + (sid == 6)):
                ref = writer.append(sid, i, i, [f"line {sid}.{i}\n".encode()])
                ic.send("receive_staged", sid, [[f"s{sid}", *ref.to_list()]])
        writer.sync()
    else:
        for sid in (5, 6):
            ic.send("receive", sid, [(sid, f"s{sid}", i, 0, b"", f"line {sid}.{i}\n".encode())
                                     for i in range(1, 6 + (sid == 6))])
    if issubclass(cls, WordCountPipeline):  # batch 1's result: emitted, not yet committed
        ic.send("job_batch", "svc-1", 0, 0, b'{"word": "line", "count": 2}\n', True)
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()
    return ic.instance


BASE_CONFIG = {"listen": "127.0.0.1:0", "sinks": {"out": "127.0.0.1:9"}}


def next_version(cls: type[Any]) -> type[Any]:
    return type(f"{cls.__name__}Next", (cls,), {"version": cls.version + 1,
                                                "__module__": __name__})


@pytest.mark.parametrize("cls", [ConnectorCoordinator, KclCoordinator, SparkCoordinator,
                                 WordCountPipeline])
def test_each_service_upgraded_to_a_version_that_adds_nothing_keeps_all_of_its_state(
        cls: type[Any]) -> None:
    config = dict(BASE_CONFIG)
    if issubclass(cls, SparkCoordinator):
        config.update(runners=["r1@127.0.0.1:9"], out="/nonexistent")
    old = populated(cls, config)
    if isinstance(old, KclCoordinator):
        old.kcl.configure(["s5"])
        old.kcl.retain(5, "s5", [KclRecord(1, b"", b"x", 0)])
    if isinstance(old, WordCountPipeline):
        ic_settings = old.jobs.settings
        assert ic_settings["jobs_in_flight"] == 2
        # Batches 1 and 2 of 2 lines, then batch 1's result let batch 3 take the 7 left.
        assert old.cut == 3 and old.emitted == 1 and old.pending_lines == 0
        assert len(old.batches) == len(old.jobs.jobs) == 2
        assert old.uncommitted and old.core.segments
    assert old.core.streams and old.core.sinks["out"].pending  # output awaiting its sink
    new = next_version(cls).upgrade_from(old)
    assert type(new).__name__ == f"{cls.__name__}Next"
    assert packed(new) == packed(old)


def test_the_pipeline_refuses_to_take_a_spark_coordinators_state_unconverted() -> None:
    assert WordCountPipeline.upgrade_problem(SparkCoordinator) is not None
    assert SparkCoordinator.upgrade_problem(ConnectorCoordinator) is not None
