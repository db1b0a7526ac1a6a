"""``--config FILE`` / ``--set KEY=VALUE``: read-only, TOML values, dotted keys, one-line
errors; ``ctx.config`` in an instance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ambrosia_py import Immortal, impulse
from ambrosia_py.runtime.config import ConfigError, load_config, parse_set
from ambrosia_py.testing.inmemory import InMemoryCoordinator


def test_sets_override_the_file_with_toml_values_or_strings(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('listen = "127.0.0.1:7100"\ncredits = 5\n[sinks]\nout = "127.0.0.1:9"\n')
    cfg = load_config(f, ["credits=8", "listen=127.0.0.1:0", "sinks.more=127.0.0.1:10",
                          "deep.a.b=[1, 2]", "flag=true"])
    assert cfg["credits"] == 8
    assert cfg["listen"] == "127.0.0.1:0"  # not TOML: kept as the string
    assert dict(cfg["sinks"]) == {"out": "127.0.0.1:9", "more": "127.0.0.1:10"}
    assert cfg["deep"]["a"]["b"] == (1, 2)
    assert cfg["flag"] is True
    with pytest.raises(TypeError):
        cfg["sinks"]["x"] = "y"


@pytest.mark.parametrize("item", ["novalue", "=3", "a..b=1", " =1"])
def test_a_malformed_set_item_is_one_line(item: str) -> None:
    with pytest.raises(ConfigError, match="is not KEY=VALUE"):
        parse_set(item)


def test_bad_files_and_keys_through_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("x = = 1\n")
    with pytest.raises(ConfigError, match="is not TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="a is a value, not a table"):
        load_config(None, ["a=1", "a.b=2"])


class Configured(Immortal):
    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    @impulse
    def take(self, cfg: dict[str, Any]) -> None:
        self.seen = cfg


def test_ctx_config_is_read_only_and_empty_by_default() -> None:
    ic = InMemoryCoordinator(Configured, config={"a": {"b": [1]}})
    ic.first_start()
    assert ic.instance.ctx.config["a"]["b"] == (1,)
    plain = InMemoryCoordinator(Configured)
    plain.first_start()
    assert dict(plain.instance.ctx.config) == {}
