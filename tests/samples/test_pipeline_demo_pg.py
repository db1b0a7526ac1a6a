"""The pipeline demo writing to PostgreSQL (``--postgres DSN``, its one line of
configuration), through its crashes: the same check passes on the tables read back, and
the tables hold each batch once with the corpus's word counts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from samples.pipeline.corpus import count_words, write_corpus
from samples.pipeline.pgoutput import sink_name
from tests.launcher import ROOT
from tests.postgres import PostgresServer, postgres  # noqa: F401 - the fixture


@pytest.mark.slow
@pytest.mark.chaos  # `make chaos`: kill -9 of PostgreSQL and the sink stays in test_pgsink
@pytest.mark.integration
@pytest.mark.xdist_group("spark")
def test_the_demo_commits_to_postgresql_through_its_crashes(
        postgres: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    dsn = postgres.new_database()
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "samples/pipeline/run_pipeline.py", "--small", "--no-upgrade",
         "--dir", str(run), "--postgres", dsn],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    expected = count_words(write_corpus(tmp_path / "again", 6000, 2))
    assert lines[-1] == (f"pipeline: {sum(expected.values())} words, counts equal to a batch "
                         "recount, every batch committed once, through 3 kill -9 crashes")
    assert any("starting the 2PC PostgreSQL sink" in line for line in lines)
    sink = sink_name(run.name)
    batches = postgres.query(dsn, "SELECT batch, lines FROM wordcount_batches WHERE sink = %s "
                                  "ORDER BY pos", (sink,))
    assert [k for k, _ in batches] == list(range(1, len(batches) + 1))
    assert sum(n for _, n in batches) == 6000
    counts = postgres.query(dsn, "SELECT word, sum(count) FROM wordcount WHERE sink = %s "
                                 "GROUP BY word", (sink,))
    assert {w: int(c) for w, c in counts} == dict(expected)
    assert postgres.query(dsn, "SELECT count(*) FROM pg_prepared_xacts") == [(0,)]
