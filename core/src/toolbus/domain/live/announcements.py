"""Self-announcing tool services: the messages, and which announcements are live.

A tool service that announces publishes, on start and then at an interval,
its tool-service descriptor and the tools it offers. Agents keep what they
hear in an :class:`AnnouncementTable`: an announcement lives for its ``ttl``
seconds after it was *received* (by the agent's own clock, so the clocks of
service and agent never need to agree), a later announcement renews it, and a
withdrawal (sent on graceful shutdown) removes it at once.

Replicas of one service announce under the same service id with different
``instance`` ids; the service stays while any instance is live, described by
the announcement received most recently.

Messages are UTF-8 JSON objects with a ``kind``:

* ``{"kind": "announce", "format": 1, "service": id, "instance": id, "ttl": s,
  "tool-service": {descriptor}, "tool": {key: descriptor}}``
* ``{"kind": "withdraw", "format": 1, "service": id, "instance": id}``
* ``{"kind": "probe", "format": 1}`` on the probe queue: "announce yourselves
  now", sent by an agent that has just started listening.

Decoders ignore unknown keys. Nothing here reads a clock: times are passed in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolbus.domain.config.descriptors import SERVICES, TOOL_SERVICE_TYPE, TOOLS
from toolbus.domain.config.schemas import arguments_from_schema

ANNOUNCE = "announce"
WITHDRAW = "withdraw"
PROBE = "probe"
FORMAT = 1
#: Seconds an announcement lives when it does not say.
DEFAULT_TTL = 30.0
#: Announcements live at least this long, whatever they say, so that a service
#: announcing a tiny TTL cannot make its tools flicker in and out.
MIN_TTL = 0.1
#: ... and at most this long, so that one announcing a huge TTL (and then dying,
#: or never withdrawing) cannot keep its tools in every agent's registry for ever.
MAX_TTL = 3600.0


@dataclass(frozen=True, slots=True)
class Announcement:
    """One service instance saying "I serve this, with these tools"."""

    service: str
    instance: str
    descriptor: Mapping[str, Any]
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ttl: float = DEFAULT_TTL

    def __post_init__(self) -> None:
        object.__setattr__(self, "descriptor", MappingProxyType(dict(self.descriptor)))
        object.__setattr__(
            self,
            "tools",
            MappingProxyType({key: MappingProxyType(dict(t)) for key, t in self.tools.items()}),
        )

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The announcement as a snapshot of its own: its service and its tools."""
        return {
            SERVICES: {self.service: dict(self.descriptor)},
            TOOLS: {key: dict(tool) for key, tool in self.tools.items()},
        }

    def same_content(self, other: Announcement) -> bool:
        """Whether both describe the same service and tools (instance and TTL aside)."""
        return self.service == other.service and self.snapshot() == other.snapshot()


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """One service instance saying "I am going; forget me now"."""

    service: str
    instance: str


@dataclass(frozen=True, slots=True)
class Probe:
    """An agent asking every announcing service to announce now."""


Message = Announcement | Withdrawal | Probe


def _encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def encode(message: Message) -> bytes:
    """The JSON body of an announcement, a withdrawal or a probe."""
    if isinstance(message, Announcement):
        return _encode(
            {
                "kind": ANNOUNCE,
                "format": FORMAT,
                "service": message.service,
                "instance": message.instance,
                "ttl": message.ttl,
                **message.snapshot(),
            }
        )
    if isinstance(message, Withdrawal):
        return _encode(
            {
                "kind": WITHDRAW,
                "format": FORMAT,
                "service": message.service,
                "instance": message.instance,
            }
        )
    return _encode({"kind": PROBE, "format": FORMAT})


def decode(
    body: bytes,
    *,
    default_ttl: float = DEFAULT_TTL,
    min_ttl: float = MIN_TTL,
    max_ttl: float = MAX_TTL,
) -> Message:
    """Decode a message; raises ``ValueError`` saying what is wrong with it.

    A missing or unusable ``ttl`` means ``default_ttl``; one below ``min_ttl``
    is raised to it, one above ``max_ttl`` cut to it. The descriptors are not
    validated here: that needs the rest of the configuration (see
    :mod:`toolbus.domain.live.layers`).
    """
    try:
        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not a JSON message: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    kind = document.get("kind")
    if kind == PROBE:
        return Probe()
    if kind not in (ANNOUNCE, WITHDRAW):
        raise ValueError(f"unknown kind {kind!r}; expected announce, withdraw or probe")
    service, instance = document.get("service"), document.get("instance")
    if not isinstance(service, str) or not service:
        raise ValueError("'service' must be a non-empty string")
    if not isinstance(instance, str) or not instance:
        raise ValueError(f"announcement of {service!r}: 'instance' must be a non-empty string")
    if kind == WITHDRAW:
        return Withdrawal(service, instance)
    services, tools = document.get(SERVICES), document.get(TOOLS, {})
    if not isinstance(services, dict) or list(services) != [service]:
        raise ValueError(
            f"announcement of {service!r}: {SERVICES!r} must hold exactly that service"
        )
    descriptor = services[service]
    if not isinstance(descriptor, dict):
        raise ValueError(f"announcement of {service!r}: the service descriptor must be an object")
    if not isinstance(tools, dict) or not all(isinstance(t, dict) for t in tools.values()):
        raise ValueError(f"announcement of {service!r}: {TOOLS!r} must map keys to objects")
    ttl = document.get("ttl")
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not math.isfinite(ttl):
        ttl = default_ttl
    return Announcement(
        service, instance, descriptor, tools, min(max(float(ttl), min_ttl), max_ttl)
    )


# --------------------------------------------------------------------------- tools


def announced_tools(
    service_id: str, tools: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Tool descriptors as a service announces them: typed as its ``tool-service`` tools."""
    return {
        key: {**dict(tool), "type": TOOL_SERVICE_TYPE, "service": service_id}
        for key, tool in tools.items()
    }


def tools_of(service_id: str, snapshot: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The tools of ``snapshot`` (e.g. a plugin's defaults) that ``service_id`` answers."""
    section = snapshot.get(TOOLS)
    if not isinstance(section, Mapping):
        return {}
    return {
        key: dict(tool)
        for key, tool in section.items()
        if isinstance(tool, Mapping) and tool.get("service") == service_id
    }


def derived_tool(
    service_id: str, description: str | None, arguments_schema: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A tool for a service that names none: called like the service, arguments from its schema.

    ``arguments_schema`` is the JSON Schema of the service's arguments (typed
    tool functions have one): the tool takes its properties, and others too when
    its ``additionalProperties`` allows them. Without a schema (an untyped
    function reads whatever it is sent) the tool declares none and takes any.
    """
    summary = (description or "").strip().split("\n\n", 1)[0]
    tool: dict[str, Any] = {
        "type": TOOL_SERVICE_TYPE,
        "name": service_id,
        "description": " ".join(summary.split()) or f"Call the {service_id} tool service",
        "service": service_id,
    }
    arguments = arguments_from_schema(arguments_schema or {})
    if arguments:
        tool["arguments"] = arguments
    if arguments_schema is None or arguments_schema.get("additionalProperties", False) not in (
        False,
        None,
    ):
        tool["additional-arguments"] = True
    return tool


# --------------------------------------------------------------------------- the table


@dataclass(slots=True)
class _Heard:
    announcement: Announcement
    expires: float
    order: int


class AnnouncementTable:
    """The announcements an agent has heard and that have not expired or been withdrawn.

    Pure bookkeeping: the caller passes ``now`` from its (injected) clock. Every
    method that can change what is offered returns whether it did, so the caller
    rebuilds its registry only when something really changed; a heartbeat that
    repeats the same announcement only renews its expiry.
    """

    def __init__(self) -> None:
        self._heard: dict[str, dict[str, _Heard]] = {}
        self._order = 0

    def __len__(self) -> int:
        return sum(len(instances) for instances in self._heard.values())

    def receive(self, announcement: Announcement, now: float) -> bool:
        """Take in an announcement; True when the services or tools offered changed."""
        before = self._current(announcement.service)
        self._order += 1
        instances = self._heard.setdefault(announcement.service, {})
        instances[announcement.instance] = _Heard(announcement, now + announcement.ttl, self._order)
        return before is None or not before.same_content(announcement)

    def withdraw(self, withdrawal: Withdrawal) -> bool:
        """Forget one instance; True when that changed what is offered."""
        instances = self._heard.get(withdrawal.service, {})
        if withdrawal.instance not in instances:
            return False
        before = self._current(withdrawal.service)
        del instances[withdrawal.instance]
        return self._changed(withdrawal.service, before)

    def expire(self, now: float) -> list[str]:
        """Drop every instance whose TTL has run out at ``now``.

        Returns the ids of services whose offer changed (gone, or now described
        by the announcement of another instance), sorted.
        """
        changed = []
        for service, instances in list(self._heard.items()):
            due = [name for name, heard in instances.items() if heard.expires <= now]
            if not due:
                continue
            before = self._current(service)
            for name in due:
                del instances[name]
            if self._changed(service, before):
                changed.append(service)
        return sorted(changed)

    def next_expiry(self) -> float | None:
        """When the next instance expires (the caller's clock), or None."""
        return min(
            (heard.expires for instances in self._heard.values() for heard in instances.values()),
            default=None,
        )

    def services(self) -> list[str]:
        """Ids of the services with at least one live instance, sorted."""
        return sorted(service for service, instances in self._heard.items() if instances)

    def instances(self, service: str) -> list[str]:
        """The live instance ids of ``service``."""
        return sorted(self._heard.get(service, {}))

    def current(self) -> tuple[Announcement, ...]:
        """One announcement per live service (its latest), ordered by service id."""
        found = (self._current(service) for service in self.services())
        return tuple(a for a in found if a is not None)

    def _current(self, service: str) -> Announcement | None:
        instances = self._heard.get(service)
        if not instances:
            return None
        return max(instances.values(), key=lambda heard: heard.order).announcement

    def _changed(self, service: str, before: Announcement | None) -> bool:
        after = self._current(service)
        if after is None:
            self._heard.pop(service, None)
        if before is None or after is None:
            return before is not after
        return not after.same_content(before)


def describe(announcements: Iterable[Announcement]) -> str:
    """``joke-service (tell-joke), calc (calculate, add)``, for logs."""
    return ", ".join(f"{a.service} ({', '.join(a.tools) or 'no tools'})" for a in announcements)
