"""``--loop`` on the long-running commands: which loop ``auto`` picks, and a clear error."""

from __future__ import annotations

import asyncio
import sys

import anyio
import pytest
from typer.testing import CliRunner

import toolbus.cli
from toolbus._internal.event_loops import (
    EventLoop,
    EventLoopUnavailable,
    backend_options,
    loop_factory,
    resolve,
    running_loop_name,
)
from toolbus.cli import app


@pytest.fixture
def without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvloop as a machine without the extra sees it: ``import uvloop`` fails."""
    monkeypatch.setitem(sys.modules, "uvloop", None)


def test_auto_picks_uvloop_when_it_is_installed() -> None:
    assert resolve("auto") is EventLoop.UVLOOP
    assert backend_options(EventLoop.AUTO) == {"use_uvloop": True}


@pytest.mark.usefixtures("without_uvloop")
def test_auto_falls_back_to_the_standard_loop_without_uvloop() -> None:
    assert resolve("auto") is EventLoop.ASYNCIO
    assert loop_factory("auto") is None


@pytest.mark.usefixtures("without_uvloop")
def test_asking_for_uvloop_without_it_names_the_extra() -> None:
    with pytest.raises(EventLoopUnavailable, match=r"pip install 'toolbus\[uvloop\]'"):
        resolve("uvloop")


def test_an_unknown_loop_lists_the_choices() -> None:
    with pytest.raises(EventLoopUnavailable, match="auto, asyncio, uvloop"):
        resolve("trio")


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_the_chosen_loop_is_the_one_that_runs(choice: str) -> None:
    async def name() -> str:
        return running_loop_name()

    assert anyio.run(name, backend_options=backend_options(choice)) == choice
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        assert runner.run(name()) == choice


@pytest.mark.usefixtures("without_uvloop")
@pytest.mark.parametrize(
    "command",
    [["serve", "joke-service"], ["agent", "serve", "--llm", "scripted://demo"], ["bench"]],
)
def test_commands_refuse_uvloop_they_cannot_have(command: list[str]) -> None:
    toolbus.cli.assemble()
    result = CliRunner().invoke(
        app, [*command, "--loop", "uvloop", "--broker", "memory://"], env={"TOOLBUS_LOOP": None}
    )
    assert result.exit_code == 2, result.output
    assert "--loop uvloop: uvloop is not installed" in result.output
    assert "pip install 'toolbus[uvloop]'" in result.output
