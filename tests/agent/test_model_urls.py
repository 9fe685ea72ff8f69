"""A key in a model URL is refused, for every LLM adapter, and never printed.

``toolbus ask`` runs as a real process against the scripted model server (the
real OpenAI and Anthropic SDKs on 127.0.0.1): a URL with user-info must stop
before anything is sent, exit 2 with the fix, and not echo the key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.model_server import ModelServer
from tests.support.servers import refusing_port
from toolbus.application.agent.llm_urls import parse_llm_url
from toolbus.domain.errors import PluginError

TOOLBUS = str(Path(sys.executable).parent / "toolbus")
SECRET = "sk-secret-0123456789"


def ask(llm: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    return subprocess.run(
        [TOOLBUS, "ask", "Hello?", "--broker", "memory://", "--llm", llm, "--timeout", "20"],
        cwd=workdir,
        env={**env, "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["openai", "anthropic"])
@pytest.mark.parametrize("userinfo", [f"{SECRET}@", f"user:{SECRET}@"])
def test_a_key_in_the_model_url_is_refused_before_anything_is_sent(
    model_server: ModelServer, tmp_path: Path, scheme: str, userinfo: str
) -> None:
    model_server.play([{"text": "I should never be asked."}])
    before = len(model_server.bodies)
    url = f"{scheme}+http://{userinfo}127.0.0.1:{model_server.port}/v1/m"

    asked = ask(url, tmp_path)

    assert asked.returncode == 2, asked.stdout + asked.stderr
    assert "api_key_env" in asked.stderr and "environment variable" in asked.stderr
    assert SECRET not in asked.stdout + asked.stderr
    assert len(model_server.bodies) == before  # nothing reached the model server


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["openai", "anthropic"])
def test_a_key_in_the_url_of_a_dead_model_is_never_printed(tmp_path: Path, scheme: str) -> None:
    with refusing_port() as port:
        url = f"{scheme}+http://user:{SECRET}@127.0.0.1:{port}/v1/m?max_retries=0"
        asked = ask(url, tmp_path)

    assert asked.returncode == 2, asked.stdout + asked.stderr
    assert SECRET not in asked.stdout + asked.stderr


@pytest.mark.parametrize(
    "url",
    [
        f"openai://{SECRET}@gpt-4.1-mini",
        f"anthropic+https://x:{SECRET}@api.example/v1/claude",
        f"openai+http://{SECRET}:@127.0.0.1:1/v1/m",
    ],
)
def test_every_form_of_user_info_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(PluginError) as refused:
        parse_llm_url(url, {})
    assert SECRET not in str(refused.value)
    assert "***@" in str(refused.value)
