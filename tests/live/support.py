"""Shared pieces of the live-configuration tests: a clock tests move by hand, and snapshots."""

from __future__ import annotations

from typing import Any

from toolbus import tool_service


class FakeClock:
    """Monotonic seconds that only move when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@tool_service("echo", request_queue="non-persistent://test/request/echo",
              response_queue="non-persistent://test/response/echo")  # fmt: skip
async def echo(text: str, times: int = 1) -> str:
    """Say the text back.

    Longer explanation that is not part of the tool's description.
    """
    return " ".join([text] * times)


@tool_service("weather")
async def weather(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    return f"sunny in {arguments.get('city', 'nowhere')} ({config.get('units', 'metric')})"


WEATHER_SERVICE = {
    "request-queue": "non-persistent://tg/request/weather",
    "response-queue": "non-persistent://tg/response/weather",
    "config-params": [{"name": "units", "required": True}],
}


def weather_tool(
    name: str = "weather", groups: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "type": "tool-service",
        "name": name,
        "description": "The weather in a city",
        "service": "weather",
        "units": "metric",
        "arguments": [{"name": "city", "type": "string", "description": "The city"}],
        **extra,
    }
    if groups is not None:
        tool["group"] = groups
    return tool


def weather_snapshot(**tools: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool-service": {"weather": WEATHER_SERVICE},
        "tool": tools or {"weather": weather_tool()},
    }
