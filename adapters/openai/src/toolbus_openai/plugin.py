"""Registers the OpenAI-compatible adapter for ``openai://`` and ``openai+http(s)://`` URLs."""

from __future__ import annotations

from toolbus.plugins import LLMInfo, LLMRegistrar, hookimpl
from toolbus_openai.llm import connect


@hookimpl
def toolbus_register_llms(register: LLMRegistrar) -> None:
    register(
        LLMInfo(
            schemes=("openai", "openai+http", "openai+https"),
            connect=connect,
            distribution="toolbus-openai",
        )
    )
