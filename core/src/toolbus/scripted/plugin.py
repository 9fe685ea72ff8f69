"""Registers the scripted model through the same entry point as every LLM adapter."""

from __future__ import annotations

from toolbus.plugins import LLMInfo, LLMRegistrar, hookimpl
from toolbus.scripted.llm import connect


@hookimpl
def toolbus_register_llms(register: LLMRegistrar) -> None:
    register(LLMInfo(schemes=("scripted",), connect=connect, distribution="toolbus"))
