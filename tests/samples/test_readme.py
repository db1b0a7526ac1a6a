"""The README's recipes, run as a user runs them: its shell blocks in bash, from a copy of
the repository root with the installed ``.venv``, real processes throughout."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ambrosia_core.ports import ephemeral_range
from ambrosia_core.processes import kill_process
from tests.launcher import ROOT

pytestmark = pytest.mark.integration

README = ROOT / "README.md"


def _section(title: str) -> str:
    """The README text under the ``###`` heading that starts with ``title``."""
    text = README.read_text()
    m = re.search(rf"^### {re.escape(title)}.*?$(.*?)(?=^##)", text, re.S | re.M)
    assert m, f"README.md has no section {title!r}"
    return m.group(1)


def _blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", section, re.S | re.M)


def _venv() -> Path:
    """The virtualenv running these tests (``make test`` runs them from ``.venv``)."""
    local = ROOT / ".venv"
    venv = local if (local / "bin" / "activate").exists() else Path(sys.prefix)
    assert (venv / "bin" / "activate").exists(), f"{venv} is not a virtualenv"
    return venv


def _checkout(tmp: Path) -> Path:
    """What a user's clone holds after ``make install``: the samples, the project file
    (pytest reads its settings) and ``.venv``."""
    root = tmp / "clone"
    root.mkdir()
    shutil.copytree(ROOT / "samples", root / "samples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / ".venv").symlink_to(_venv())
    return root


def _bash(script: str, cwd: Path, tmp: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a user's shell would; whatever it leaves running is killed."""
    env = {k: v for k, v in os.environ.items() if k != "AMBROSIA_HOME"}
    env["TMPDIR"] = str(tmp)  # where the README's `mktemp -d` puts its registry
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process(proc)
        out, err = proc.communicate()
        raise AssertionError(f"the recipe did not finish in {timeout} s:\n{out}\n{err}"
                             ) from None
    finally:
        kill_process(proc)  # what it left running in its group
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_repro_recipe_records_runs_and_its_pytest_snippet_passes(tmp_path: Path) -> None:
    section = _section("Repro and upgrade tests from pytest")
    record, run_tests = _blocks(section, "sh")
    (snippet,) = _blocks(section, "python")
    assert "save this as `test_recorded.py` in the repository root" in section
    root = _checkout(tmp_path)
    (root / "test_recorded.py").write_text(snippet)
    r = _bash(record + run_tests, root, tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^2 passed in ", r.stdout, re.M), r.stdout


def _free_range(n: int) -> int:
    """A base ``P`` with ports ``P+1 .. P+n`` free on 127.0.0.1, below the ephemeral range
    (where an outgoing connection could take one before the recipe listens on it)."""
    lo, _ = ephemeral_range()
    for base in range(16000 + os.getpid() % 500 * 20, lo - n - 1, 97):
        socks = []
        try:
            for port in range(base + 1, base + n + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free port range")


def test_the_active_active_recipe_fails_over_to_the_standby(tmp_path: Path) -> None:
    (recipe,) = _blocks(_section("Active/active"), "sh")
    assert re.search(r"^P=27100 ", recipe, re.M)
    # The one edit a user may need: a free port range on this busy machine.
    recipe = re.sub(r"^P=27100 ", f"P={_free_range(9)} ", recipe, flags=re.M)
    r = _bash(recipe, _checkout(tmp_path), tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = [re.sub(r"^[\d-]+ [\d:,]+ ", "", ln) for ln in r.stdout.splitlines()
             if "becoming primary" in ln or "epoch" in ln]
    assert shown == [
        "ambrosia-ic: counter-aa: replica 2: primary of epoch 2, writing log 2 from sequence "
        "id 2",
        "ambrosia.counter-aa: count is 1 on becoming primary",
    ], r.stdout


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
@pytest.mark.chaos  # `make chaos`: Spark's first job takes minutes on 2 cores
@pytest.mark.timeout(900)  # the recipe's own limit is 600 s
def test_the_by_hand_recipe_kills_the_pipeline_mid_job_and_commits_every_line_once(
        tmp_path: Path) -> None:
    recipe = _blocks(_section("By hand"), "sh")[0]
    install, rest = recipe.split("\n", 1)
    assert "pip install -e '.[spark,demo]'" in install  # done: the tests run in that .venv
    # The one edit a user may need: free ports on this busy machine.
    base = _free_range(4)
    for k, port in enumerate(("7100", "7200", "7301", "15002"), 1):
        assert port in rest
        rest = rest.replace(port, str(base + k))
    root = _checkout(tmp_path)
    shutil.copy(ROOT / "README.md", root / "README.md")
    (root / "ic-harness").mkdir()
    shutil.copy(ROOT / "ic-harness" / "README.md", root / "ic-harness" / "README.md")
    r = _bash(rest, root, tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    log = (root / "run" / "wc.log").read_text()
    # The kill came once a job had started, and the restart recovered (it did not start
    # afresh): what the recipe tells the reader to look for.
    started = log.index("attempt 1 started")
    assert "recovery complete" in log[started:] and "became primary after recovery" in log
    # The status the recipe prints at the end shows the job (its status file is written
    # now and then, so the job may still read as running there).
    assert re.search(r"^wordcount-1\s+(running|done)\s", "\n".join(
        ln.strip() for ln in r.stdout.splitlines()), re.M), r.stdout[-3000:]
    # Every line of both files committed once, with its words counted by the job's rule.
    from ambrosia_services.pipeline import count_words
    lines = [ln for f in ("README.md", "ic-harness/README.md")
             for ln in (root / f).read_text().splitlines()]
    committed = (root / "run" / "sink" / "committed").read_text().splitlines()
    batches = [ln.split("\t") for ln in committed if ln.startswith("#batch")]
    assert sum(int(b[2]) for b in batches) == len(lines), batches
    counts: dict[str, int] = {}
    for ln in committed:
        if ln and not ln.startswith("#"):
            word, n = ln.split("\t")
            counts[word] = counts.get(word, 0) + int(n)
    assert counts == dict(count_words(lines))


# ------------------------------------------------------------------ every command parses

_DOCS = [README, *(ROOT / "samples" / s / "README.md" for s in ("hello", "counter", "upgrade"))]
_SHELL_END = {">", "2>", "&", "2>&1", "|", ";", "&&"}


def _commands(path: Path) -> list[str]:
    """The ``ambrosia`` commands a reader may paste: every one in a ``sh`` block, and the
    inline ones with options and no placeholders (``...``, ``MODULE:CLASS``, ``N``)."""
    text = path.read_text()
    found = []
    for block in _blocks(text, "sh"):
        block = re.sub(r"\\\n\s*", " ", block)  # a command continued over lines: one
        for line in block.splitlines():
            line = re.sub(r"^timeout \d+ ", "", line.split(" #")[0].strip())
            if line.startswith("ambrosia "):
                found.append(line)
    for inline in re.findall(r"`(ambrosia [^`]*)`", text):
        if " -" in inline and "..." not in inline and not re.search(r"\b[A-Z]+\b", inline):
            found.append(inline)
    return found


def _argv(command: str) -> list[str]:
    command = re.sub(r"\$\(\(P\+(\d)\)\)", lambda m: str(27100 + int(m.group(1))), command)
    command = command.replace("$AMBROSIA_HOME", "/tmp/home")
    argv = []
    for token in shlex.split(command)[1:]:
        if token in _SHELL_END or token.startswith(("2>", ">")):
            break
        argv.append(token)
    return argv


@pytest.mark.parametrize("doc", _DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_ambrosia_command_in_the_docs_parses_and_its_class_imports(doc: Path) -> None:
    from ambrosia_cli import run as run_cli
    from ambrosia_cli.main import build_parser
    from ambrosia_py.runtime.cli import load_class

    commands = _commands(doc)
    assert commands, f"{doc} shows no ambrosia command"
    for command in commands:
        argv = _argv(command)
        try:
            if argv[0] == "run":
                args = run_cli.build_parser().parse_args(argv[1:])
                for target in filter(None, (args.target, args.upgrade_to)):
                    load_class(run_cli.shipped(target))
            else:
                build_parser().parse_args(argv)
        except SystemExit as exit_:
            raise AssertionError(f"{doc.name}: `{command}` does not parse ({exit_})") from None
