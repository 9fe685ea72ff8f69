"""``make_agent``: an agent harness over the test's kit and the scripted model server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest

from tests.agent.support import AgentHarness, llm_url
from tests.support.model_server import ModelServer
from toolbus.application.agent.llm import LLM
from toolbus.plugins import connect_llm
from toolbus.testing.kit import ToolTestKit

MakeAgent = Callable[..., Awaitable[AgentHarness]]


@pytest.fixture
async def make_agent(toolbus: ToolTestKit, model_server: ModelServer) -> AsyncIterator[MakeAgent]:
    """``await make_agent(provider="openai", snapshot=..., llm_options=..., **loop_options)``."""
    made: list[LLM] = []

    async def make(
        provider: str = "openai",
        snapshot: Mapping[str, Any] | None = None,
        llm_options: Mapping[str, Any] | None = None,
        **loop_options: Any,
    ) -> AgentHarness:
        llm = await connect_llm(llm_url(model_server, provider, **dict(llm_options or {})))
        made.append(llm)
        return AgentHarness(toolbus, llm, snapshot, **loop_options)

    yield make
    for llm in made:
        await llm.aclose()
