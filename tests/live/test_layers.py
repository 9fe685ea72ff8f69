"""Precedence of configuration sources: config service > local > announcements (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.live.support import WEATHER_SERVICE, weather_snapshot, weather_tool
from toolbus.domain.config.descriptors import TOOL_SERVICE_TYPE
from toolbus.domain.errors import ConfigError
from toolbus.domain.live.announcements import Announcement, announced_tools
from toolbus.domain.live.layers import CONFIGURATION, compose, overlay


def announcement(
    service: str = "echo", tools: dict[str, dict[str, Any]] | None = None, **descriptor: Any
) -> Announcement:
    return Announcement(
        service,
        "instance-1",
        {
            "request-queue": f"non-persistent://test/request/{service}",
            "response-queue": f"non-persistent://test/response/{service}",
            **descriptor,
        },
        announced_tools(
            service,
            tools if tools is not None else {service: {"name": service, "description": "d"}},
        ),
    )


def test_overlay_replaces_entries_key_by_key_later_layers_winning() -> None:
    local = {"tool": {"a": 1, "b": 2}, "tool-service": {"s": 1}, "note": "x"}
    service = {"tool": {"b": 20, "c": 30}, "note": "y"}
    assert overlay(local, service) == {
        "tool": {"a": 1, "b": 20, "c": 30},
        "tool-service": {"s": 1},
        "note": "y",
    }
    assert local == {"tool": {"a": 1, "b": 2}, "tool-service": {"s": 1}, "note": "x"}


def test_announced_tools_join_the_configured_ones() -> None:
    composition = compose(weather_snapshot(), [announcement("echo")])

    assert list(composition.registry.tools) == ["weather", "echo"]
    assert composition.announced == ("echo",)
    assert composition.clashes == ()
    assert composition.registry.tool("echo").type == TOOL_SERVICE_TYPE


def test_nothing_configured_and_only_announcements_is_fine() -> None:
    composition = compose({}, [announcement("echo"), announcement("clock")])
    assert sorted(composition.registry.tools) == ["clock", "echo"]


def test_a_configured_tool_wins_over_an_announced_one_with_its_name() -> None:
    announced = announcement("other", {"mine": {"name": "weather", "description": "fake"}})

    composition = compose(weather_snapshot(), [announced])

    assert composition.registry.tool("weather").service == "weather"
    (clash,) = composition.clashes
    assert clash.winner == CONFIGURATION
    assert str(clash) == (
        "tool 'mine' (name 'weather') announced by tool service 'other' is ignored: "
        "the configuration already has a tool named 'weather'"
    )


def test_a_clash_by_llm_name_counts_too() -> None:
    configured = weather_snapshot(weather=weather_tool("the weather"))
    announced = announcement("other", {"mine": {"name": "the_weather", "description": "d"}})

    composition = compose(configured, [announced])

    (clash,) = composition.clashes
    assert clash.reason == "a tool named 'the_weather'"
    assert composition.registry.tool("the_weather").name == "the weather"


def test_a_configured_service_wins_over_the_announced_one() -> None:
    announced = announcement(
        "weather",
        {"forecast": {"name": "forecast", "description": "d", "units": "si"}},
        **{"config-params": [{"name": "units", "required": True}]},
    )

    composition = compose(weather_snapshot(), [announced])

    assert (
        composition.registry.services["weather"].request_queue == WEATHER_SERVICE["request-queue"]
    )
    assert [c.entry for c in composition.clashes] == ["tool-service 'weather'"]
    # Its tools still join, served through the configured descriptor.
    assert composition.registry.tool("forecast").service == "weather"


def test_announcing_exactly_what_is_configured_is_no_clash() -> None:
    configured = {
        "tool-service": {"echo": dict(announcement("echo").descriptor)},
        "tool": {"echo": json.dumps(dict(announcement("echo").tools["echo"]))},
    }
    composition = compose(configured, [announcement("echo")])
    assert composition.clashes == ()
    assert list(composition.registry.tools) == ["echo"]


def test_between_announcements_the_smaller_service_id_wins() -> None:
    first = announcement("a-service", {"x": {"name": "shared", "description": "d"}})
    second = announcement("b-service", {"y": {"name": "shared", "description": "d"}})

    composition = compose({}, [second, first])

    assert composition.registry.tool("shared").service == "a-service"
    (clash,) = composition.clashes
    assert clash.service == "b-service"
    assert clash.winner == "tool service 'a-service'"


def test_an_invalid_announcement_is_left_out_alone() -> None:
    broken = announcement("broken", {"b": {"name": "b"}})  # no description

    composition = compose(weather_snapshot(), [broken, announcement("echo")])

    assert sorted(composition.registry.tools) == ["echo", "weather"]
    assert list(composition.rejected) == ["broken"]
    assert "field 'description': is required" in str(composition.rejected["broken"])


def test_an_announcement_that_does_not_fit_the_configuration_is_left_out_alone() -> None:
    # Valid by itself, but its tool lacks the config value the *configured*
    # weather service requires.
    misfit = announcement("weather", {"forecast": {"name": "forecast", "description": "d"}})

    composition = compose(weather_snapshot(), [misfit, announcement("echo")])

    assert sorted(composition.registry.tools) == ["echo", "weather"]
    assert composition.announced == ("echo",)
    assert "required config param" in str(composition.rejected["weather"])


def test_an_invalid_configuration_is_an_error_whatever_is_announced() -> None:
    with pytest.raises(ConfigError):
        compose({"tool": {"x": weather_tool()}}, [announcement("echo")])
