"""``/healthz`` (the process is up), ``/readyz`` (it can serve now, and why not), ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from toolbus_gateway.http_auth import gateway_of

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is up")
async def healthz(request: Request) -> dict[str, object]:
    """Always 200 while the process serves HTTP; for liveness probes."""
    gateway = gateway_of(request)
    return {"status": "ok", "uptime_seconds": round(gateway.clock() - gateway.started, 3)}


@router.get(
    "/readyz",
    summary="The gateway can serve calls",
    responses={503: {"description": "Not ready; the body says why"}},
)
async def readyz(request: Request) -> JSONResponse:
    """200 when the broker is connected and the configuration loaded, else 503, with reasons."""
    readiness = gateway_of(request).readiness()
    return JSONResponse(
        {"ready": readiness.ready, "checks": readiness.checks},
        status_code=200 if readiness.ready else 503,
    )


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """The toolbus and gateway metrics in Prometheus' text format (no credential needed)."""
    registry = gateway_of(request).metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
