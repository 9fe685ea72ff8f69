"""What ``toolbus serve`` resolves: the ``config`` service, announcing settings, tool defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolbus.application.live.announcements import Announcer
from toolbus.application.live.companions import companions_for
from toolbus.application.live.config_service import ConfigPublisher, ConfigService
from toolbus.cli._serve_plan import describe, plan_services
from toolbus.domain.errors import ConfigError
from toolbus.memory.bus import MemoryBus
from toolbus.settings import Settings


def close(services: list[object]) -> None:
    for service in services:
        if isinstance(service, ConfigService):
            service.close()


def test_config_names_the_config_service_on_the_given_store(tmp_path: Path) -> None:
    plan = plan_services(
        ["config", "joke-service"], Settings(), store=tmp_path / "s.json", cwd=tmp_path, environ={}
    )
    try:
        config, joke = plan.services
        assert isinstance(config, ConfigService)
        assert config.store.path == tmp_path / "s.json"
        assert joke.id == "joke-service"
        assert (plan.announce, plan.interval) == (True, 10.0)
        assert "tell-joke" in plan.defaults["tool"]
        assert "tool-service" in plan.tool_types
    finally:
        close(plan.services)


def test_the_store_and_announcing_come_from_toolbus_toml_unless_flags_say(tmp_path: Path) -> None:
    file = {
        "config-service": {"store": "state/s.json"},
        "announcements": {"enabled": False, "interval": 3},
    }
    plan = plan_services(["config"], Settings(file=file), cwd=tmp_path, environ={})
    try:
        (config,) = plan.services
        assert isinstance(config, ConfigService)
        assert config.store.path == tmp_path / "state" / "s.json"
        assert (plan.announce, plan.interval) == (False, 3.0)
    finally:
        close(plan.services)

    flagged = plan_services(
        ["joke-service"], Settings(file=file), announce=True, interval=0.5, environ={}
    )
    assert (flagged.announce, flagged.interval) == (True, 0.5)


def test_the_config_service_needs_a_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a store file: give --store PATH"):
        plan_services(["config"], Settings(), cwd=tmp_path, environ={})
    with pytest.raises(ConfigError, match="add 'config' to the services"):
        plan_services(["joke-service"], Settings(), store=tmp_path / "s.json", environ={})


@pytest.mark.anyio
async def test_the_operator_is_told_what_runs_alongside(
    memory_bus: MemoryBus, tmp_path: Path
) -> None:
    plan = plan_services(
        ["config", "joke-service"], Settings(), store=tmp_path / "s.json", environ={}
    )
    try:
        publisher, announcer = companions_for(
            memory_bus,
            plan.services,
            announce=plan.announce,
            interval=plan.interval,
            defaults=plan.defaults,
            tool_types=plan.tool_types,
        )
        assert isinstance(publisher, ConfigPublisher)
        assert isinstance(announcer, Announcer)
        assert describe(publisher) == (
            f"config store {tmp_path / 's.json'} at version 0; "
            "changes are pushed on non-persistent://toolbus/config/changes"
        )
        assert describe(announcer) == "announcing joke-service (tell-joke) every 10 s"
    finally:
        close(plan.services)
