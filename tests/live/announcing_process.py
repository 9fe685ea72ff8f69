"""A tool service process that announces itself, for the process-level tests.

``python announcing_process.py --broker URL --service ID --interval S --ttl S``
serves a typed echo service under ID and announces it, the way ``toolbus serve``
does with announcing on. SIGTERM or SIGINT withdraws the announcement, then
drains and exits; SIGKILL leaves agents to notice by the TTL.
"""

from __future__ import annotations

import argparse
import signal
import sys

import anyio

from toolbus import ServiceHost, tool_service
from toolbus.application.live.announcements import Announcer
from toolbus.plugins import connect


async def main(broker: str, service_id: str, interval: float, ttl: float) -> None:
    @tool_service(service_id)
    async def echo(text: str) -> str:
        """Say the text back, from another process."""
        return f"{text} (pid {__import__('os').getpid()})"

    bus = await connect(broker)
    host = ServiceHost(bus, echo)
    announcer = Announcer(bus, echo, interval=interval, ttl=ttl)
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tasks:
                await tasks.start(host.serve)
                await tasks.start(announcer.run)
                print(f"announced {service_id}", file=sys.stderr, flush=True)
                async for _ in signals:
                    announcer.stop()  # withdraw first, so agents stop choosing us
                    host.stop()
                    break
    finally:
        with anyio.CancelScope(shield=True):
            await bus.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--ttl", type=float, required=True)
    args = parser.parse_args()
    anyio.run(main, args.broker, args.service, args.interval, args.ttl)
