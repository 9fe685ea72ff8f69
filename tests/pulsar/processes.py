"""Running ``toolbus`` in a process of its own, as a deployment would."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

#: The directory holding ``tests/``, so that ``tests.pulsar...`` imports in a child.
REPOSITORY = Path(__file__).resolve().parents[2]


def toolbus_command() -> list[str]:
    """The ``toolbus`` console script of this environment."""
    script = Path(sys.executable).with_name("toolbus")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from toolbus.cli import main; main()"]


def child_environment(**extra: str) -> dict[str, str]:
    """This environment without ``TOOLBUS_*`` settings, able to import the test package."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    paths = [str(REPOSITORY), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra)
    return env


async def wait_for_line(stream: ByteReceiveStream, text: str, timeout: float) -> str:
    """Read ``stream`` until a line containing ``text``; fail after ``timeout`` seconds."""
    seen = b""
    with anyio.fail_after(timeout):
        while True:
            try:
                seen += await stream.receive()
            except anyio.EndOfStream:
                raise AssertionError(
                    f"the process ended before printing {text!r}; it printed:\n"
                    + seen.decode(errors="replace")
                ) from None
            for line in seen.decode(errors="replace").splitlines():
                if text in line:
                    return line
