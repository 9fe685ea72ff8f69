"""Talking to the config service: put, get, list and delete ``TYPE/KEY`` items over the bus.

::

    async with ToolServiceClient(bus) as client:
        config = ConfigClient(client)
        version = await config.put("tool/tell-joke", {"type": "tool-service", ...})
        print(await config.get("tool/tell-joke"))

A refused change raises :class:`~toolbus.domain.live.items.ConfigRejected`
whose message lists every problem; a missing item raises
:class:`~toolbus.domain.errors.NotFound`; no answer within the timeout raises
:class:`~toolbus.domain.errors.ToolTimeout`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.live.config_service import (
    CONFIG_REQUEST_QUEUE,
    CONFIG_RESPONSE_QUEUE,
    CONFIG_SERVICE_ID,
)
from toolbus.domain.errors import ConfigError, ToolCallError, ToolServiceError
from toolbus.domain.live.items import (
    SNAPSHOT_FORMAT,
    ConfigRejected,
    ConfigVersion,
    Delete,
    ItemName,
    Put,
    decode_version,
    parse_item,
    parse_type,
)

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class ChangeResult:
    """What a change came to: the version now current, and whether this change made it."""

    version: int
    changed: bool


class ConfigClient:
    """A client of the config service, over a :class:`ToolServiceClient`."""

    def __init__(
        self,
        client: ToolServiceClient,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        user: str = "",
        request_queue: str = CONFIG_REQUEST_QUEUE,
        response_queue: str = CONFIG_RESPONSE_QUEUE,
    ) -> None:
        self.client = client
        self.timeout = timeout
        #: Who the changes are made for; the config service logs it with each change.
        self.user = user
        self.request_queue = request_queue
        self.response_queue = response_queue

    async def _request(self, arguments: Mapping[str, Any], timeout: float | None) -> Any:
        try:
            text = await self.client.call(
                request_queue=self.request_queue,
                response_queue=self.response_queue,
                user=self.user,
                arguments=arguments,
                timeout=self.timeout if timeout is None else timeout,
                service=CONFIG_SERVICE_ID,
            )
        except ToolCallError as exc:
            if exc.error_type == ConfigRejected.error_type:
                raise ConfigRejected(exc.message) from None
            raise
        try:
            return json.loads(text)
        except ValueError:
            raise ToolServiceError(f"the config service answered with non-JSON: {text!r}") from None

    async def put(
        self, item: str | ItemName, value: Any, *, timeout: float | None = None
    ) -> ChangeResult:
        """Set ``TYPE/KEY`` to ``value`` (a JSON value: a descriptor object or JSON string)."""
        name = _item(item)
        answer = await self._request(
            {"operation": "put", "type": name.type, "key": name.key, "value": value}, timeout
        )
        return ChangeResult(int(answer["version"]), bool(answer["changed"]))

    async def delete(self, item: str | ItemName, *, timeout: float | None = None) -> ChangeResult:
        """Remove ``TYPE/KEY``; raises :class:`NotFound` when it is not there."""
        name = _item(item)
        answer = await self._request(
            {"operation": "delete", "type": name.type, "key": name.key}, timeout
        )
        return ChangeResult(int(answer["version"]), bool(answer["changed"]))

    async def apply(
        self,
        changes: Iterable[Put | Delete],
        *,
        replace: bool = False,
        timeout: float | None = None,
    ) -> ChangeResult:
        """Make several changes as one version: all are stored, or none.

        With ``replace`` the result is exactly the puts given (everything else is removed).
        """
        encoded = []
        for change in changes:
            entry: dict[str, Any] = {
                "operation": change.operation,
                "type": change.name.type,
                "key": change.name.key,
            }
            if isinstance(change, Put):
                entry["value"] = change.value
            encoded.append(entry)
        answer = await self._request(
            {"operation": "apply", "changes": encoded, "replace": replace}, timeout
        )
        return ChangeResult(int(answer["version"]), bool(answer["changed"]))

    async def get(self, item: str | ItemName, *, timeout: float | None = None) -> Any:
        """The value of ``TYPE/KEY``; raises :class:`NotFound` when it is not there."""
        name = _item(item)
        answer = await self._request(
            {"operation": "get", "type": name.type, "key": name.key}, timeout
        )
        return answer["value"]

    async def list(
        self, type: str | None = None, *, timeout: float | None = None
    ) -> list[ItemName]:
        """Every ``TYPE/KEY`` (or those of one type), in configuration order."""
        arguments: dict[str, Any] = {"operation": "list"}
        if type is not None:
            arguments["type"] = parse_type(type)
        answer = await self._request(arguments, timeout)
        return [parse_item(text) for text in answer["items"]]

    async def snapshot(self, *, timeout: float | None = None) -> ConfigVersion:
        """The whole current version: store id, version number and snapshot."""
        answer = await self._request({"operation": "snapshot"}, timeout)
        try:
            return decode_version(
                json.dumps({"format": SNAPSHOT_FORMAT, **answer}),
                where="the config service's answer",
            )
        except ConfigError as exc:
            raise ToolServiceError(str(exc)) from None


def _item(item: str | ItemName) -> ItemName:
    return item if isinstance(item, ItemName) else parse_item(item)
