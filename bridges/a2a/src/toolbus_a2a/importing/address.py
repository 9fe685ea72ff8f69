"""Where a remote A2A agent is, and what to send it: :class:`AgentAddress`.

Credentials are secrets: a bearer token and header values are read from this
process's environment, by variable name, and never shown (not in ``repr``,
not in messages, not in logs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

from toolbus.domain.errors import ConfigError, Problem


@dataclass(frozen=True, slots=True)
class AgentAddress:
    """A remote agent's base URL, its card's path, and the headers every request carries."""

    url: str
    card_path: str = AGENT_CARD_WELL_KNOWN_PATH
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def describe(self) -> str:
        """The URL without user-info or query (which may hold a secret)."""
        parts = urlsplit(self.url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"

    @classmethod
    def parse(
        cls,
        url: str,
        *,
        card_path: str = AGENT_CARD_WELL_KNOWN_PATH,
        bearer_env: str | None = None,
        headers: Sequence[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> AgentAddress:
        """From command-line text: ``bearer_env`` names the variable holding a bearer token;
        ``headers`` entries are ``Header-Name=VARIABLE``. Raises :class:`ConfigError` naming
        every problem (never a value)."""
        environ = os.environ if environ is None else environ
        problems: list[Problem] = []
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(
                Problem("the A2A agent", "URL", f"{url!r} is not an http(s) URL of an agent")
            )
        elif parts.username or parts.password:
            problems.append(
                Problem(
                    "the A2A agent",
                    "URL",
                    "must not hold credentials; give a token with --bearer-env VARIABLE",
                )
            )
        if not card_path.startswith("/"):
            problems.append(Problem("the A2A agent", "--card-path", "must start with '/'"))
        sent: dict[str, str] = {}
        if bearer_env is not None:
            token = environ.get(bearer_env, "").strip()
            if not token:
                problems.append(
                    Problem(
                        "the A2A agent",
                        "--bearer-env",
                        f"environment variable {bearer_env!r} is not set (or empty); set it "
                        "to the agent's token",
                    )
                )
            sent["Authorization"] = f"Bearer {token}"
        for entry in headers:
            name, equals, variable = entry.partition("=")
            if not equals or not name.strip() or not variable.strip():
                problems.append(
                    Problem("the A2A agent", "--header", f"{entry!r}: give NAME=VARIABLE")
                )
                continue
            value = environ.get(variable.strip(), "")
            if not value:
                problems.append(
                    Problem(
                        "the A2A agent",
                        "--header",
                        f"{name.strip()}: environment variable {variable.strip()!r} is not set "
                        "(or empty)",
                    )
                )
            sent[name.strip()] = value
        if problems:
            raise ConfigError(problems)
        return cls(url.rstrip("/"), card_path, sent)
