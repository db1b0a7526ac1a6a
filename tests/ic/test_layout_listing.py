"""The directory listings every start, recovery and pruning reads (``logstore.layout``):
the numbers of each kind of file, and the temporary files a killed checkpoint write
left; a directory that is not there lists nothing, and any other error is raised."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ambrosia_ic.logstore import checkpoint_temps, file_numbers


def test_numbers_and_temporaries_are_read_from_one_listing(tmp_path: Path) -> None:
    for name in ("serverlog2", "serverlog10", "serverlog1", "serverlogx", "serverchkpt3",
                 ".serverchkpt3.0a1b.tmp", ".serverchkpt12.ff.tmp", ".serverchkpt4.zz.tmp",
                 "serverchkpt3.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert file_numbers(tmp_path, "serverlog") == [1, 2, 10]
    assert file_numbers(tmp_path, "serverchkpt") == [3]
    assert checkpoint_temps(tmp_path) == [tmp_path / ".serverchkpt12.ff.tmp",
                                          tmp_path / ".serverchkpt3.0a1b.tmp"]
    assert checkpoint_temps(tmp_path, 4) == [tmp_path / ".serverchkpt12.ff.tmp"]
    assert checkpoint_temps(tmp_path, 1, 11) == [tmp_path / ".serverchkpt3.0a1b.tmp"]


def test_what_is_not_a_directory_lists_nothing(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_bytes(b"serverlog1")
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    for d in (tmp_path / "gone", afile, afile / "below", loop, tmp_path / "dangling"):
        if d.name == "dangling":
            os.symlink(tmp_path / "nowhere", d)
        assert file_numbers(d, "serverlog") == [], d
        assert checkpoint_temps(d) == [], d


def test_any_other_error_of_the_listing_is_raised(tmp_path: Path) -> None:
    too_long = tmp_path / ("x" * 300)  # not "no such directory": a name it cannot have
    with pytest.raises(OSError, match="File name too long"):
        file_numbers(too_long, "serverlog")
    with pytest.raises(OSError, match="File name too long"):
        checkpoint_temps(too_long)
