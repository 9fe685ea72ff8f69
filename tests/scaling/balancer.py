"""A real round-robin load balancer for replicas: Debian's haproxy, as our own process.

No stickiness: each request goes to the next replica in turn, whatever
session, workflow or cookie it carries, so a session's next request reaches
another replica. Each answer says which replica served it (``X-Served-By``).
A replica that stops answering is taken out after one failed check (every
200 ms), and a request whose connection to it failed is sent to the other
one, as a load balancer in production is set up to do.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from tests.support.real_parts import missing
from tests.support.servers import LOOPBACK, StickyPort, server_process

#: The header each answer names its replica in.
SERVED_BY = "x-served-by"


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if found is None:
        missing("haproxy (the replica tests)", "apt-get install haproxy")
    return found


def config(port: int, replicas: Sequence[int]) -> str:
    servers = "\n".join(
        f"    server r{n} {LOOPBACK}:{replica} check inter 200ms fall 1 rise 2"
        for n, replica in enumerate(replicas)
    )
    return f"""global
    maxconn 2048

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    option redispatch
    retries 3
    retry-on conn-failure

frontend front
    bind {LOOPBACK}:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    http-response set-header X-Served-By %s
{servers}
"""


def round_robin(replicas: Sequence[int], workdir: Path) -> AbstractContextManager[str]:
    """haproxy in front of the replicas' ports until the block ends; yields its base URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    binary = haproxy_binary()

    @contextmanager
    def balancer(port: int) -> Iterator[str]:
        path = workdir / "haproxy.cfg"
        path.write_text(config(port, replicas))
        with server_process([binary, "-db", "-f", str(path)], port=port, workdir=workdir):
            yield f"http://{LOOPBACK}:{port}"

    return StickyPort(balancer).running()
