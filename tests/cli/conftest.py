"""Fixtures for the command-line tests."""

from __future__ import annotations

import pytest
import typer.rich_utils


@pytest.fixture
def wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """Help rendered 400 columns wide, so that no option's text wraps.

    typer reads ``TERMINAL_WIDTH`` once, when ``typer.rich_utils`` is first
    imported, so setting the variable for one invocation works only if no
    earlier test imported it: set the width typer read instead.
    """
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 400)
