"""The app each ``toolbus gateway --workers N`` process serves, built from the command's
arguments, which the command leaves in :data:`~toolbus_gateway.commands.WORKER_ARGUMENTS`."""

from __future__ import annotations

import os

from fastapi import FastAPI

from toolbus._internal.heap import settle_heap
from toolbus_gateway.app import create_app
from toolbus_gateway.commands import WORKER_ARGUMENTS, GatewayArguments, build_gateway


def app() -> FastAPI:
    """The gateway the command was asked for; its lifespan connects this worker."""
    arguments = GatewayArguments.from_json(os.environ[WORKER_ARGUMENTS])
    served, _, _ = build_gateway(arguments)
    app = create_app(served)
    settle_heap()  # imports, configuration and the app stay for the worker's life
    return app
