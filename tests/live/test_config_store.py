"""The config store: one JSON file, atomic replacement, a version per change, one writer."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.live.support import weather_snapshot
from toolbus.application.live.config_store import ConfigStore, StoreLocked
from toolbus.domain.errors import ConfigError
from toolbus.domain.live.items import STORE_FORMAT


def test_a_new_store_is_written_at_once_and_keeps_its_identity(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "store.json"
    with ConfigStore(path) as store:
        first = store.current
    assert first.version == 0
    assert json.loads(path.read_text())["format"] == STORE_FORMAT
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # values may be credentials

    with ConfigStore(path) as store:
        assert store.current.store == first.store


def test_every_commit_is_the_next_version_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    with ConfigStore(path) as store:
        one = store.commit(weather_snapshot())
        two = store.commit({**weather_snapshot(), "permissions": {"fallback": ["default"]}})
    assert (one.version, two.version) == (1, 2)

    with ConfigStore(path) as store:
        assert store.current == two
        assert dict(store.current.snapshot) == {
            **weather_snapshot(),
            "permissions": {"fallback": ["default"]},
        }


def test_a_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store.json"
    with ConfigStore(path) as store:
        store.commit(weather_snapshot())
        before = path.read_bytes()

        def fail(src: str, dst: str) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", fail)
        with pytest.raises(OSError, match="No space"):
            store.commit({})

        assert store.current.version == 1
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.json", "store.json.lock"]


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    with ConfigStore(path), pytest.raises(StoreLocked, match="in use by another process"):
        ConfigStore(path).open()
    with ConfigStore(path) as store:  # released again
        assert store.current.version == 0


def test_a_damaged_store_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    path.write_text('{"format": "something else"}')

    with pytest.raises(ConfigError) as caught:
        ConfigStore(path).open()

    assert "field 'format'" in str(caught.value)
    assert "was left untouched; repair or move it" in str(caught.value)
    assert path.read_text() == '{"format": "something else"}'
    path.write_text("{")
    # Not StoreLocked: the failed open released the lock.
    with pytest.raises(ConfigError, match="is not valid JSON"):
        ConfigStore(path).open()


def test_using_a_closed_store_says_how_to_open_it(tmp_path: Path) -> None:
    store = ConfigStore(tmp_path / "s.json")
    assert "closed" in repr(store)
    with pytest.raises(RuntimeError, match="with ConfigStore"):
        store.current  # noqa: B018
