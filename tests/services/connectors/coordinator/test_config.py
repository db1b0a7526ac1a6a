"""The coordinator's configuration: defaults, one-line errors naming the key."""

from __future__ import annotations

import pytest

from services.connectors import CoordinatorConfig
from services.connectors.coordinator import CoordinatorConfigError


def test_defaults_and_the_decision_part() -> None:
    cfg = CoordinatorConfig.from_mapping({"sinks": {"b": "127.0.0.1:2", "a": "h:1"}})
    assert cfg.listen_address == ("127.0.0.1", 7100)
    assert (cfg.credits, cfg.interval_bytes, cfg.batch_messages) == (1000, 65536, 512)
    assert cfg.decision_part() == {"sinks": ["a", "b"], "interval_bytes": 65536,
                                   "interval_seconds": 0.5}


@pytest.mark.parametrize(("config", "message"), [
    ({"lisen": "x"}, "unknown configuration key(s) lisen"),
    ({"listen": "nohost"}, 'listen must be "host:port"'),
    ({"listen": "h:70000"}, 'listen must be "host:port"'),
    ({"credits": 0}, "credits must be an integer >= 1"),
    ({"credits": "5"}, "credits must be an integer >= 1"),
    ({"interval_seconds": 0}, "interval_seconds must be a number of seconds > 0"),
    ({"sinks": {"out": 5}}, 'sinks.out must be a "host:port" string'),
    ({"sinks": "out"}, "sinks must be a table"),
    ({"cookie": 1}, "cookie must be a string"),
])
def test_bad_values_are_one_line_naming_the_key(config: dict[str, object],
                                                message: str) -> None:
    with pytest.raises(CoordinatorConfigError) as info:
        CoordinatorConfig.from_mapping(config)
    assert message in str(info.value) and "\n" not in str(info.value)
