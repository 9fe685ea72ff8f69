"""LLM adapters are found by URL scheme through the toolbus.llms entry points, like brokers."""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys
from collections.abc import Sequence

import pytest

import toolbus.plugins.installed as installed
from toolbus.application.agent.llm import LLM
from toolbus.domain.errors import PluginError
from toolbus.plugins import LLM_GROUP, connect_llm, llm_adapter_for

pytestmark = pytest.mark.anyio

REAL_ENTRY_POINTS = installed.entry_points


def hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    def entry_points(group: str) -> Sequence[metadata.EntryPoint]:
        found = REAL_ENTRY_POINTS(group)
        return [ep for ep in found if not (group == LLM_GROUP and ep.name in names)]

    monkeypatch.setattr(installed, "entry_points", entry_points)


@pytest.mark.parametrize(
    ("url", "distribution"),
    [
        ("openai://gpt-4.1-mini", "toolbus-openai"),
        ("openai+http://127.0.0.1:1/v1/m", "toolbus-openai"),
        ("anthropic+https://h/m", "toolbus-anthropic"),
        ("scripted://demo", "toolbus"),
    ],
)
def test_each_scheme_finds_its_adapter(url: str, distribution: str) -> None:
    assert llm_adapter_for(url).distribution == distribution


@pytest.mark.parametrize("scheme", ["openai", "anthropic"])
def test_a_missing_first_party_adapter_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    hide(monkeypatch, scheme)
    with pytest.raises(PluginError, match=rf"pip install 'toolbus\[{scheme}\]'"):
        llm_adapter_for(f"{scheme}://model")


def test_a_url_without_a_scheme_says_what_one_looks_like() -> None:
    with pytest.raises(PluginError, match="openai://MODEL"):
        llm_adapter_for("gpt-4.1-mini")


async def test_connected_models_have_the_port_shape() -> None:
    llm = await connect_llm("openai+http://127.0.0.1:1/v1/m")
    try:
        assert isinstance(llm, LLM)
        assert (llm.model, llm.tool_format) == ("m", "openai")
    finally:
        await llm.aclose()


def test_only_the_llm_adapter_the_url_names_is_imported() -> None:
    code = (
        "import sys; from toolbus.plugins import llm_adapter_for; "
        "llm_adapter_for('scripted://demo'); "
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
