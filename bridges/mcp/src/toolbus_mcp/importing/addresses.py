"""Where an imported MCP server is: a command to start (stdio) or a URL (streamable HTTP).

A started server's environment variables, an HTTP server's headers and the
OAuth client secret an HTTP server's tokens are got with are secrets: their
values are read from this process's environment, by name, and never shown
(not in ``repr``, not in messages, not in logs).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toolbus._internal.secure_urls import plain_http_problem
from toolbus._internal.urls import redact_url
from toolbus.application.identity.credentials import Secret
from toolbus.domain.errors import ConfigError, Problem
from toolbus_mcp.importing.client_credentials import ClientCredentials


@dataclass(frozen=True, slots=True)
class McpServerAddress:
    """Where a toolset's MCP server is: a command to start (stdio) or a URL (streamable HTTP).

    ``env`` (for a command) and ``headers`` (for a URL) hold secret values;
    they are left out of ``repr`` so that no log can show them. ``oauth``: a
    URL's server wants an identity provider's tokens, got by the
    client-credentials grant.
    """

    command: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    oauth: ClientCredentials | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError("give an MCP server either a command or a URL, not both")
        if self.oauth is not None and self.url is None:
            raise ValueError("OAuth client credentials are for an MCP server at a URL")

    @classmethod
    def parse(
        cls,
        *,
        command: str | None = None,
        url: str | None = None,
        env: Sequence[str] = (),
        headers: Sequence[str] = (),
        oauth_issuer: str | None = None,
        oauth_client_id: str | None = None,
        oauth_client_secret: str | None = None,
        oauth_scope: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> McpServerAddress:
        """From command-line text: ``command`` is split like a shell would.

        ``env`` entries are ``NAME`` (pass this process's ``NAME``) or
        ``NAME=SOURCE`` (set ``NAME`` to this process's ``SOURCE``); ``headers``
        entries are ``Header-Name=SOURCE``. ``oauth_client_id`` and
        ``oauth_client_secret`` name the variables holding the client's
        credentials at ``oauth_issuer``. Raises :class:`ConfigError` naming
        every variable that is not set (never a value).
        """
        environ = os.environ if environ is None else environ
        problems: list[Problem] = []
        if (command is None) == (url is None):
            problems.append(Problem("the MCP server", "", "give exactly one of --command or --url"))
        argv = tuple(shlex.split(command)) if command else ()
        if command is not None and not argv:
            problems.append(Problem("the MCP server", "--command", "is empty"))
        if url is not None and env:
            problems.append(
                Problem(
                    "the MCP server",
                    "--env",
                    "sets a started server's environment; an HTTP server takes --header",
                )
            )
        if command is not None and headers:
            problems.append(
                Problem("the MCP server", "--header", "is for --url; a command takes --env")
            )
        values = {
            "--env": _from_environment(env, environ, problems, "--env"),
            "--header": _from_environment(headers, environ, problems, "--header"),
        }
        oauth = _client_credentials(
            oauth_issuer,
            oauth_client_id,
            oauth_client_secret,
            oauth_scope,
            for_url=url is not None,
            environ=environ,
            problems=problems,
        )
        if problems:
            raise ConfigError(problems)
        if argv:
            return cls(command=argv, env=values["--env"])
        assert url is not None
        return cls(url=url, headers=values["--header"], oauth=oauth)

    def describe(self) -> str:
        """For logs: the command, or the URL without user info or option values."""
        return shlex.join(self.command) if self.command else redact_url(str(self.url))


def _from_environment(
    entries: Sequence[str], environ: Mapping[str, str], problems: list[Problem], option: str
) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in entries:
        name, sep, source = entry.partition("=")
        source = source if sep else name
        if not name or not source:
            problems.append(
                Problem("the MCP server", option, f"{entry!r} must be NAME or NAME=VAR")
            )
            continue
        value = environ.get(source)
        if value is None:
            problems.append(
                Problem(
                    "the MCP server",
                    option,
                    f"environment variable {source!r} (for {name!r}) is not set; "
                    "export it before starting the bridge",
                )
            )
            continue
        found[name] = value
    return found


def _client_credentials(
    issuer: str | None,
    client_id: str | None,
    client_secret: str | None,
    scope: str | None,
    *,
    for_url: bool,
    environ: Mapping[str, str],
    problems: list[Problem],
) -> ClientCredentials | None:
    where = "the MCP server"
    given = [
        option
        for option, value in (
            ("--oauth-client-id", client_id),
            ("--oauth-client-secret", client_secret),
            ("--oauth-scope", scope),
        )
        if value is not None
    ]
    if issuer is None:
        if given:
            problems.append(
                Problem(
                    where,
                    given[0],
                    "needs --oauth-issuer: the authorization server that issued the client's "
                    "credentials (they are sent nowhere else)",
                )
            )
        return None
    before = len(problems)
    if not for_url:
        problems.append(
            Problem(where, "--oauth-issuer", "is for a server at a --url; a command takes --env")
        )
    problem = plain_http_problem(issuer, risk="the client secret would travel in the clear")
    if problem is not None:
        problems.append(Problem(where, "--oauth-issuer", problem))
    found: dict[str, str] = {}
    for option, variable in (
        ("--oauth-client-id", client_id),
        ("--oauth-client-secret", client_secret),
    ):
        if variable is None:
            problems.append(
                Problem(
                    where,
                    option,
                    "is required with --oauth-issuer: the name of the environment variable "
                    "that holds it",
                )
            )
            continue
        value = environ.get(variable)
        if not value:
            problems.append(
                Problem(
                    where,
                    option,
                    f"environment variable {variable!r} is not set (or empty); export it "
                    "before starting the bridge",
                )
            )
            continue
        found[option] = value
    if len(problems) > before:
        return None
    return ClientCredentials(
        issuer,
        found["--oauth-client-id"],
        Secret(found["--oauth-client-secret"]),
        scope,
    )
