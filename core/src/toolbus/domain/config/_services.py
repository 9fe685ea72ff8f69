"""Checking a tool-service descriptor: its id, its two queues, its config params, its wire."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbus.domain.calls.queues import QueueName, parse_queue
from toolbus.domain.calls.wire import NEWEST_GENERATION, generation_of
from toolbus.domain.config._fields import Problems
from toolbus.domain.config.descriptors import TRUSTGRAPH_WIRE, ConfigParam, ServiceDescriptor
from toolbus.domain.config.parsing import describe
from toolbus.domain.errors import QueueNameError, WireError


def _config_params(value: Any, where: str, problems: Problems) -> tuple[ConfigParam, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(
            where,
            "config-params",
            f'must be a list like [{{"name": "collection", "required": true}}, "style"], '
            f"not {describe(value)}",
        )
        return ()
    params: list[ConfigParam] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        at = f"config-params[{index}]"
        name: Any
        required: Any
        if isinstance(item, str):
            name, required = item, False
        elif isinstance(item, dict):
            name, required = item.get("name"), item.get("required", False)
            if not isinstance(required, bool):
                problems.add(
                    where, at, f"'required' must be true or false, not {describe(required)}"
                )
                continue
        else:
            problems.add(
                where,
                at,
                f'must be a name or {{"name": ..., "required": ...}}, not {describe(item)}',
            )
            continue
        if not isinstance(name, str) or not name:
            problems.add(where, at, f"needs a non-empty string 'name', not {describe(name)}")
            continue
        if name in seen:
            problems.add(where, at, f"declares {name!r} twice; keep one")
            continue
        seen.add(name)
        params.append(ConfigParam(name, required))
    return tuple(params)


def check_service(key: str, raw: Mapping[str, Any], problems: Problems) -> ServiceDescriptor | None:
    where = f"tool-service {key!r}"
    before = len(problems)
    declared_id = raw.get("id", key)
    if declared_id != key:
        problems.add(
            where,
            "id",
            f"is {describe(declared_id)}, but the service is stored under key {key!r}, "
            "which tools use to find it; make them the same",
        )
    queues: list[QueueName] = []
    for name, role in (("request-queue", "request"), ("response-queue", "response")):
        value = raw.get(name)
        example = f"e.g. 'non-persistent://tg/{role}/{key}'"
        if value is None:
            problems.add(where, name, f"is required; {example}")
        elif not isinstance(value, str) or not value:
            problems.add(
                where, name, f"must be a non-empty queue name ({example}), not {describe(value)}"
            )
        else:
            try:
                queues.append(parse_queue(value))
            except QueueNameError as exc:
                problems.add(where, name, str(exc))
    if len(queues) == 2 and (
        queues[0].topic == queues[1].topic or queues[0].dotted == queues[1].dotted
    ):
        problems.add(
            where,
            "response-queue",
            f"names the same queue as 'request-queue' ({queues[0].raw!r}); the service would "
            "read its own responses as requests, so give the responses a queue of their own",
        )
    params = _config_params(raw.get("config-params"), where, problems)
    generation = NEWEST_GENERATION
    version = raw.get(TRUSTGRAPH_WIRE, NEWEST_GENERATION)
    if not isinstance(version, str):
        problems.add(
            where,
            TRUSTGRAPH_WIRE,
            f"must be a string such as '2.1' or '2.4', not {describe(version)}",
        )
    else:
        try:
            generation = generation_of(version)
        except WireError as exc:
            problems.add(where, TRUSTGRAPH_WIRE, str(exc))
    if len(problems) > before:
        return None
    return ServiceDescriptor(key, raw["request-queue"], raw["response-queue"], params, generation)
