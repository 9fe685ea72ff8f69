"""``/healthz`` (the process is up), ``/readyz`` (it can serve now, and why not), ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from toolbus.application.identity.credentials import bearer_token
from toolbus_gateway.http_auth import ConsoleForbidden, authenticate, gateway_of

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
    """The toolbus and gateway metrics in Prometheus' text format.

    By default (``metrics = "redacted"`` in ``[gateway]``) no credential is
    needed and the series carry no tool, service, group or state names: they
    are added up over them. With ``metrics = "operators"`` an operator's
    credential is required and the series are whole.
    """
    gateway = gateway_of(request)
    await gateway.figures.refresh()  # the sessions held in the state store, counted afresh
    registry = gateway.metrics.registry
    if gateway.settings.metrics == "operators":
        caller = await authenticate(request, bearer_token(request.headers.get("authorization")))
        if not gateway.is_operator(caller.user):
            raise ConsoleForbidden(caller.user)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(Redacted(registry)), media_type=CONTENT_TYPE_LATEST)


#: Labels that name configuration a caller may not be allowed to see.
NAMING_LABELS = frozenset({"tool", "service", "group", "state", "from_state", "to_state"})


class Redacted:
    """A registry's metrics without the naming labels: samples added up over them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue  # a sum of creation times means nothing
                kept = tuple(
                    sorted((k, v) for k, v in sample.labels.items() if k not in NAMING_LABELS)
                )
                key = (sample.name, kept)
                merged[key] = merged.get(key, 0.0) + sample.value
            redacted = Metric(family.name, family.documentation, family.type, family.unit)
            for (name, labels), value in merged.items():
                redacted.add_sample(name, dict(labels), value)
            yield redacted
