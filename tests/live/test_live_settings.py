"""Live-configuration settings from toolbus.toml and the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolbus.domain.errors import ConfigError
from toolbus.domain.live.settings import LiveSettings, read_live_settings


def test_defaults() -> None:
    assert read_live_settings({}, base=Path("/etc"), environ={}) == LiveSettings()


def test_the_file_then_the_environment() -> None:
    file = {
        "config-service": {"store": "state/store.json", "follow": False},
        "announcements": {"enabled": False, "interval": 2, "accept": False},
    }
    settings = read_live_settings(file, base=Path("/srv"), environ={})
    assert settings == LiveSettings(Path("/srv/state/store.json"), False, False, 2.0, False)

    overridden = read_live_settings(
        file, base=Path("/srv"), environ={"TOOLBUS_CONFIG_STORE": "/data/s.json"}
    )
    assert overridden.store == Path("/data/s.json")


def test_every_mistake_is_named() -> None:
    file = {
        "config-service": {"store": 3, "folow": True},
        "announcements": {"enabled": "yes", "interval": -1},
    }
    with pytest.raises(ConfigError) as caught:
        read_live_settings(file, base=Path("/"), environ={})
    assert [(p.where, p.field) for p in caught.value.problems] == [
        ("toolbus.toml [config-service]", "folow"),
        ("toolbus.toml [config-service]", "store"),
        ("toolbus.toml [announcements]", "enabled"),
        ("toolbus.toml [announcements]", "interval"),
    ]
    with pytest.raises(ConfigError, match="must be a table"):
        read_live_settings({"announcements": 1}, base=Path("/"), environ={})
