"""Running pulsar-lite (a Pulsar-protocol-compatible server, not Apache Pulsar) for tests.

The binary comes from the pinned ``pulsar-lite`` dev dependency. It is started
from a directory holding a ``pulsar-lite.toml`` that turns its metrics HTTP
server off: otherwise every instance binds 0.0.0.0:8080 and a second one exits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

from tests.support.servers import LOOPBACK, StickyPort, server_process

BINARY = Path(str(files("pulsar_lite") / "bin" / "pulsar-lite"))
CONFIG = "[metrics]\nenabled = false\n"


@contextlib.contextmanager
def pulsar_lite_server(
    workdir: Path, log_level: str = "warn", port: int | None = None
) -> Iterator[str]:
    """Run pulsar-lite with its data in ``workdir`` on ``port`` (default: a free one).

    Yields its URL. Run it again with the same ``workdir`` and ``port`` to restart it
    with its data.
    """
    if port is None:
        with StickyPort(
            lambda chosen: pulsar_lite_server(workdir, log_level, chosen)
        ).running() as url:
            yield url
        return
    config = workdir / "pulsar-lite.toml"
    config.write_text(CONFIG)
    argv = [
        str(BINARY),
        "--config",
        str(config),
        "--addr",
        f"{LOOPBACK}:{port}",
        "--db-path",
        str(workdir / "data"),
        "--log-level",
        log_level,
    ]
    with server_process(argv, port=port, workdir=workdir):
        yield f"pulsar://{LOOPBACK}:{port}"
