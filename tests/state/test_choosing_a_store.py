"""A state store is chosen by URL, through the toolbus.state_stores entry points, and named in
toolbus.toml; bad URLs and options get errors that say what to write, and never a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

import toolbus
from toolbus.domain.errors import BrokerOptionError, ConfigError, PluginError
from toolbus.memory.state import MemoryStateStore
from toolbus.plugins import connect_state, state_store_for
from toolbus.settings import load_settings

pytestmark = pytest.mark.anyio


def test_each_scheme_names_its_store_and_distribution() -> None:
    assert state_store_for("memory://").distribution == "toolbus"
    assert state_store_for("nats://127.0.0.1:4222").distribution == "toolbus-nats"
    assert state_store_for("nats+tls://127.0.0.1:4222").distribution == "toolbus-nats"
    assert state_store_for("redis://127.0.0.1:6379").distribution == "toolbus-redis"
    assert state_store_for("rediss://127.0.0.1:6379").distribution == "toolbus-redis"


async def test_an_unknown_scheme_lists_the_installed_stores() -> None:
    with pytest.raises(PluginError) as caught:
        await toolbus.connect_state("etcd://127.0.0.1:2379")
    assert "no state store for etcd:// is installed" in str(caught.value)
    assert "installed state stores: memory, nats, redis" in str(caught.value)


async def test_a_url_without_a_scheme_says_which_urls_there_are() -> None:
    with pytest.raises(PluginError, match=r"state store URL .* has no scheme; use memory://"):
        await connect_state("sessions")


async def test_the_in_memory_store_refuses_an_unknown_option() -> None:
    with pytest.raises(BrokerOptionError, match="max_value_siz") as caught:
        await connect_state("memory://options?max_value_siz=10")
    assert "did you mean 'max_value_size'?" in str(caught.value)
    store = await connect_state("memory://options?max_value_size=10")
    assert isinstance(store, MemoryStateStore) and store.max_value_size == 10


def test_toolbus_toml_names_the_store_and_its_options(tmp_path: Path) -> None:
    (tmp_path / "toolbus.toml").write_text(
        'state = "redis://127.0.0.1:6379/2"\n[state-options]\nprefix = "shop"\n'
    )
    settings = load_settings(cwd=tmp_path, environ={})
    assert settings.state == "redis://127.0.0.1:6379/2"
    assert settings.state_options == {"prefix": "shop"}

    from_environment = load_settings(cwd=tmp_path, environ={"TOOLBUS_STATE": "memory://"})
    assert from_environment.state == "memory://"
    assert load_settings(cwd=tmp_path, environ={}, state="nats://n:4222").state == "nats://n:4222"


def test_no_store_is_configured_unless_one_is_named(tmp_path: Path) -> None:
    assert load_settings(cwd=tmp_path, environ={}).state is None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("state = 5\n", "state"),
        ('state = ""\n', "state"),
        ('state-options = "x"\n', "state-options"),
    ],
)
def test_a_bad_state_setting_is_a_config_error_naming_it(
    tmp_path: Path, text: str, field: str
) -> None:
    (tmp_path / "toolbus.toml").write_text(text)
    with pytest.raises(ConfigError, match=f"field '{field}'"):
        load_settings(cwd=tmp_path, environ={})


async def test_an_in_memory_store_keeps_the_clock_it_was_made_with() -> None:
    from toolbus.domain.errors import StateStoreError
    from toolbus.memory.state import connect

    def first_clock() -> float:
        return 0.0

    await connect("memory://clocked", clock=first_clock)
    assert isinstance(await connect("memory://clocked", clock=first_clock), MemoryStateStore)
    with pytest.raises(StateStoreError, match="already runs on another clock"):
        await connect("memory://clocked", clock=lambda: 1.0)
