"""Two clients of the NATS micro discovery protocol (``$SRV.PING|INFO|STATS``) for tests.

The official ``nats`` CLI is a Go program that no package registry reachable
here ships, so the tests ask the way it does with two other clients:

* :func:`ask` speaks the documented protocol with nats-py: a request on
  ``$SRV.<VERB>.<name>`` gathers one answer from every instance, read with
  nats-py's own micro response types;
* :func:`ask_with_node` asks through the official JavaScript client's services
  client (the ``nats`` package of ``tests/node``, which ``.ci/run`` installs),
  the same library calls that ``nats micro`` makes in Go (:data:`needs_node_client`).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import nats
from nats.micro.service import ServiceInfo, ServicePing, ServiceStats

from tests.support.real_parts import NODE_PACKAGES, requires_node_package

NODE_DIR = NODE_PACKAGES
_TYPES = {"PING": ServicePing, "INFO": ServiceInfo, "STATS": ServiceStats}


async def ask(url: str, verb: str, name: str, instances: int, timeout: float = 10.0) -> list[Any]:
    """Every answer of the ``instances`` instances of ``name`` to ``$SRV.<verb>``, parsed."""
    nc = await nats.connect(url)
    try:
        inbox = nc.new_inbox()
        answers: list[Any] = []
        done = anyio.Event()

        async def collect(msg: Any) -> None:
            answers.append(_TYPES[verb].from_dict(json.loads(msg.data)))
            if len(answers) == instances:
                done.set()

        subscription = await nc.subscribe(inbox, cb=collect)
        await nc.publish(f"$SRV.{verb}.{name}", b"", reply=inbox)
        with anyio.fail_after(timeout):
            await done.wait()
        await subscription.unsubscribe()
        return answers
    finally:
        await nc.close()


#: Marks a test that runs :func:`ask_with_node`.
needs_node_client = requires_node_package("nats", "the official NATS JavaScript client")


async def ask_with_node(url: str, verb: str, name: str | None = None) -> list[dict[str, Any]]:
    """The answers the official JavaScript services client gets (``ping``, ``info``, ``stats``)."""
    argv = ["node", str(NODE_DIR / "micro.mjs"), url, verb, *([name] if name else [])]
    result = await anyio.run_process(argv, cwd=NODE_DIR, check=False)
    if result.returncode != 0:
        raise AssertionError(f"{argv} failed:\n{result.stderr.decode()}")
    answers: list[dict[str, Any]] = json.loads(result.stdout)
    return answers
