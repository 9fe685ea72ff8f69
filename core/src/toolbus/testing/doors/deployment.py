"""What every door under test is given: its ``toolbus.toml`` and ``config.json``, a tool
plugin with two code hooks, a call policy, and the shop service the suite serves itself."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from toolbus.application.agent.audit import AuditRecord
from toolbus.application.calls.service import ToolService, tool_service

#: The users of the suite's ``toolbus.toml``: each case uses its own, so that
#: cases never share a user's sessions, workflows or limits.
USERS = (
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "ken",
    "ops",
)
#: Groups each user may request; ``ops`` may request every group.
PERMITTED = {user: ["default"] for user in USERS if user != "ops"} | {"ops": ["*"]}
#: States a caller may ask to start in; any other is reached only through a held session.
ENTRY_STATES = ("undefined", "browsing")
#: Held sessions (gateway sessions, agent sessions) and MCP workflows per user.
MAX_PER_USER = 2
#: A card number the redaction hook must remove from every answer.
CARD = "4111-1111-1111-1111"
REDACTED = "[redacted]"
DENY_REASON = "Only administrators may delete accounts"
#: What the call policy's forbid says (with ``toolbus[policy]``).
POLICY_REASON = "Nobody may look up the vault"
#: Seconds a call of ``refund`` waits for an approver before it expires.
APPROVAL_TIMEOUT = 1
#: What the call policy says of a ``restock`` that is not a dry run.
REHEARSAL_REASON = "Restocking is rehearsed first"
#: The call policy every door reads, when Cedar is installed: all calls, but the
#: vault's, and restocking only as a dry run (``true``, a JSON Boolean).
POLICIES = f"""permit(principal, action == Action::"call", resource);

@reason("{POLICY_REASON}")
forbid(principal, action, resource)
when {{ context.arguments has item && context.arguments.item == "vault" }};

@reason("{REHEARSAL_REASON}")
forbid(principal, action, resource == Tool::"restock")
unless {{ context.arguments has dry_run && context.arguments.dry_run }};
"""

_SERVICE = "door-conformance-shop"
_REQUEST_QUEUE = "non-persistent://door-conformance/request/shop"
_RESPONSE_QUEUE = "non-persistent://door-conformance/response/shop"

PLUGIN_MODULE = "toolbus_door_conformance_hooks"
PLUGIN_SOURCE = f'''
"""Code hooks of the front-door conformance suite."""

import re

from toolbus.hooks import Deny, hookimpl

CARD = re.compile(r"\\b\\d{{4}}(?:-\\d{{4}}){{3}}\\b")


@hookimpl
def toolbus_on_pre_tool_use(session, tool):
    if tool.name == "delete-account" and session.user != "ops":
        return Deny({DENY_REASON!r})


@hookimpl
def toolbus_on_post_tool_use(outcome):
    return CARD.sub({REDACTED!r}, outcome.observation)
'''


def api_key(user: str) -> str:
    """The API key of ``user`` in the suite's ``toolbus.toml`` (test material, not a secret)."""
    return f"door-conformance-{user}-key-0123456789"


def key_variable(user: str) -> str:
    """The environment variable ``toolbus.toml`` reads ``user``'s API key from."""
    return f"DOOR_KEY_{user.upper()}"


def _tool(name: str, action: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "tool-service",
        "name": name,
        "description": f"The shop's {name} tool",
        "service": _SERVICE,
        "action": action,
        "arguments": [
            {"name": "item", "type": "string", "description": "An item", "required": False}
        ],
        **extra,
    }


#: The tools every door serves: one per case, all on one service.
CONFIG: dict[str, Any] = {
    "tool-service": {
        _SERVICE: {
            "id": _SERVICE,
            "request-queue": _REQUEST_QUEUE,
            "response-queue": _RESPONSE_QUEUE,
            "config-params": [{"name": "action", "required": True}],
        }
    },
    "tool": {
        "lookup": _tool("lookup", "lookup"),
        "delete-account": _tool("delete-account", "delete"),
        "admin-reset": _tool("admin-reset", "reset", group=["admin"]),
        "add-to-cart": _tool("add-to-cart", "add", state="shopping"),
        "checkout": _tool(
            "checkout", "checkout", state="done", **{"applicable-states": ["shopping"]}
        ),
        "browse": _tool("browse", "browse", **{"applicable-states": ["browsing"]}),
        "hold": _tool("hold", "hold"),
        # Needs approval ([approvals] tools); nobody gives it in time.
        "refund": _tool("refund", "refund"),
        "restock": _tool("restock", "restock")
        | {
            "arguments": [
                {"name": "item", "type": "string", "description": "An item"},
                {"name": "dry_run", "type": "boolean", "description": "Rehearse only"},
            ]
        },
    },
}


def policy_engine_installed() -> bool:
    """Whether Cedar (``toolbus[policy]``) is installed: the doors then read :data:`POLICIES`."""
    return importlib.util.find_spec("toolbus_cedar") is not None


def toolbus_toml(broker: str) -> str:
    """The operator's ``toolbus.toml`` every door reads: no secret in it, keys by variable."""
    users = "\n".join(f"{user} = {json.dumps(groups)}" for user, groups in PERMITTED.items())
    keys = "\n".join(
        f'[[credentials.api-keys]]\nuser = "{user}"\nenv = "{key_variable(user)}"\n'
        for user in USERS
    )
    return (
        textwrap.dedent(
            f"""\
        broker = {json.dumps(broker)}
        config = "config.json"

        [doors]
        entry-states = {json.dumps(list(ENTRY_STATES))}
        max-sessions-per-user = {MAX_PER_USER}
        max-workflows-per-user = {MAX_PER_USER}
        audit-file = "audit.jsonl"

        [approvals]
        approvers = ["ops"]
        tools = ["refund"]
        timeout = {APPROVAL_TIMEOUT}

        [permissions]
        fallback = []

        [permissions.users]
        """
        )
        + f"{users}\n\n{keys}"
        + ('\n[policy]\nfiles = ["calls.cedar"]\n' if policy_engine_installed() else "")
    )


class ShopService:
    """The one service behind every tool: counts the calls that reach it, by user and action.

    ``hold`` calls wait until :meth:`release` (a door's caller holding a session
    open while the suite checks the per-user limits).
    """

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self._released = anyio.Event()
        self._holding: dict[str, int] = {}
        self._arrived = anyio.Event()

        @tool_service(
            _SERVICE,
            request_queue=_REQUEST_QUEUE,
            response_queue=_RESPONSE_QUEUE,
            config_params=[{"name": "action", "required": True}],
        )
        async def shop(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            action = str(config.get("action"))
            self.calls[(user, action)] += 1
            if action == "hold":
                self._holding[user] = self._holding.get(user, 0) + 1
                self._arrived.set()
                await self._released.wait()
                return f"held for {user}"
            if action == "lookup":
                return f"{user}: card {CARD} on file"
            return f"{action} done for {user}"

        self.service: ToolService = shop

    def reached(self, user: str, action: str | None = None) -> int:
        """Calls of ``user`` (of one ``action``) that reached the service."""
        return sum(
            n for (who, what), n in self.calls.items() if who == user and action in (None, what)
        )

    async def holding(self, user: str, count: int, timeout: float = 30.0) -> None:
        """Wait until ``count`` ``hold`` calls of ``user`` are waiting in the service."""
        with anyio.fail_after(timeout):
            while self._holding.get(user, 0) < count:
                self._arrived = anyio.Event()
                await self._arrived.wait()

    def release(self) -> None:
        """Let every waiting ``hold`` call answer, and later ones answer at once."""
        self._released.set()


@dataclass
class DoorSetup:
    """What every door of one test class is given; see the module docs."""

    directory: Path
    site: Path
    broker: str
    shop: ShopService

    @property
    def settings_file(self) -> Path:
        return self.directory / "toolbus.toml"

    @property
    def config_file(self) -> Path:
        return self.directory / "config.json"

    @property
    def audit_file(self) -> Path:
        return self.directory / "audit.jsonl"

    def environment(self) -> dict[str, str]:
        """Variables a door's process needs: the API keys, and the plugin on the path."""
        keys = {key_variable(user): api_key(user) for user in USERS}
        return {**keys, "PYTHONPATH": str(self.site)}

    def audit(self, user: str) -> list[AuditRecord]:
        """The audit records written so far for ``user``'s sessions."""
        if not self.audit_file.exists():
            return []
        records = []
        for line in self.audit_file.read_text(encoding="utf-8").splitlines():
            if line.strip() and '"event":"agent-session"' in line.replace(" ", ""):
                record = AuditRecord.model_validate_json(line)
                if record.user == user:
                    records.append(record)
        return records


def install_plugin(site: Path) -> None:
    """The suite's code hooks as an installed tool plugin on ``site`` (a path entry)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{PLUGIN_MODULE}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    info = site / f"{PLUGIN_MODULE}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PLUGIN_MODULE}\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[toolbus.plugins]\ndoor-conformance = {PLUGIN_MODULE}\n", encoding="utf-8"
    )
