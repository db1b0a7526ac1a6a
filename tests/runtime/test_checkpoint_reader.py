"""The checkpoint reader reads large bin objects straight from the file; whatever path an
object takes, the objects must be exactly those a plain msgpack reader sees."""

from __future__ import annotations

import io
import tempfile

import msgpack
import pytest

from ambrosia_py.runtime import checkpoint as ckpt


def _stream(big: int) -> tuple[bytes, list[object]]:
    objects: list[object] = [{"a": 1}, "name", b"x" * big, 7, [1, 2, 3], b"y" * 70000,
                             "after", b"", b"z" * (3 * big)]
    return b"".join(msgpack.packb(o, use_bin_type=True) for o in objects), objects


@pytest.mark.parametrize("big", [10, 70000, 3 << 20])
def test_objects_equal_plain_msgpacks_in_memory_and_on_disk(big: int) -> None:
    data, objects = _stream(big)
    assert list(msgpack.Unpacker(io.BytesIO(data), raw=False,
                                 max_buffer_size=len(data))) == objects
    assert list(ckpt.read_objects(io.BytesIO(data))) == objects
    with tempfile.TemporaryFile() as f:
        f.write(b"prefix")
        f.write(data)
        f.seek(6)
        got = list(ckpt.read_objects(f))
    assert got == objects
    assert all(type(a) is type(b) for a, b in zip(got, objects, strict=True))


def test_a_large_bin_cut_short_ends_the_objects_before_it() -> None:
    data, objects = _stream(3 << 20)
    cut = data[:len(data) - 5]  # inside the last (large) bin
    assert list(ckpt.read_objects(io.BytesIO(cut))) == objects[:-1]
