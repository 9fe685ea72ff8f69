"""The front-door conformance suite: one set of cases every door must pass.

A *front door* is how a caller outside the bus reaches its tools: the HTTP
gateway, ``toolbus mcp serve`` (stdio and HTTP), the agent service asked with
``toolbus ask``, ``open_tools`` in Python. Every door promises the same
(docs/access-control.md): a caller sees and runs only what its user, groups
and state allow; code hooks and configured hooks run on every call; a refusal
tells the caller no more than "not available to you", and is audited.

The cases are written once against a small driver interface
(:class:`DoorDriver`) and bound to each door through its real transport, as
:class:`~toolbus.testing.conformance.BusConformance` is bound to each broker::

    class TestMyDoor(DoorConformance):
        @pytest.fixture(scope="class")
        async def door(self, door_setup):
            async with my_driver(door_setup) as driver:
                yield driver

What every door is given (:class:`DoorSetup`): a directory holding
``toolbus.toml`` (permissions, per-user limits, entry states, an audit file,
API keys read from environment variables) and ``config.json`` (the tools);
a ``site`` directory holding a tool plugin with two code hooks (a ``Deny`` for
``delete-account`` unless the user is ``ops``, and a post-use hook redacting
card numbers), to put on ``PYTHONPATH``; the broker, where the suite serves
the tools' service itself, so that it sees every call that reaches it.

Its parts: what every door is given (:mod:`~toolbus.testing.doors.deployment`),
the driver interface (:mod:`~toolbus.testing.doors.drivers`) and the cases
(:mod:`~toolbus.testing.doors.cases`). The suite is pytest tests: install it
with ``pip install 'toolbus[testing]'``.
"""

from __future__ import annotations

from toolbus.testing.doors.cases import DoorConformance
from toolbus.testing.doors.deployment import (
    CARD,
    CONFIG,
    DENY_REASON,
    ENTRY_STATES,
    MAX_PER_USER,
    PERMITTED,
    POLICIES,
    POLICY_REASON,
    REDACTED,
    REHEARSAL_REASON,
    USERS,
    DoorSetup,
    ShopService,
    api_key,
    install_plugin,
    key_variable,
    policy_engine_installed,
    toolbus_toml,
)
from toolbus.testing.doors.drivers import (
    DoorAnswer,
    DoorCaller,
    DoorDriver,
    DoorSession,
    Occupied,
    Outcome,
    normalized,
)

__all__ = [
    "APPROVAL_TIMEOUT",
    "CARD",
    "CONFIG",
    "DENY_REASON",
    "ENTRY_STATES",
    "MAX_PER_USER",
    "PERMITTED",
    "POLICIES",
    "POLICY_REASON",
    "REDACTED",
    "REHEARSAL_REASON",
    "USERS",
    "DoorAnswer",
    "DoorCaller",
    "DoorConformance",
    "DoorDriver",
    "DoorSession",
    "DoorSetup",
    "Occupied",
    "Outcome",
    "ShopService",
    "api_key",
    "install_plugin",
    "key_variable",
    "normalized",
    "policy_engine_installed",
    "toolbus_toml",
]
