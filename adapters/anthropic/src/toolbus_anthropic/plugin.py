"""Registers the Anthropic adapter for ``anthropic://`` and ``anthropic+http(s)://`` URLs."""

from __future__ import annotations

from toolbus.plugins import LLMInfo, LLMRegistrar, hookimpl
from toolbus_anthropic.llm import connect


@hookimpl
def toolbus_register_llms(register: LLMRegistrar) -> None:
    register(
        LLMInfo(
            schemes=("anthropic", "anthropic+http", "anthropic+https"),
            connect=connect,
            distribution="toolbus-anthropic",
        )
    )
