"""An agent's Agent Card, generated from what it announces: :func:`agent_card`.

* ``name`` and ``description``: the agent's (``toolbus agent serve --name
  --description``);
* ``skills``: one per tool group the agent's tools are in, naming its tools;
* ``supportedInterfaces``: JSON-RPC and HTTP+JSON, A2A 1.0, under the door's
  public URL at ``/agents/{name}/jsonrpc`` and ``/agents/{name}/rest``;
* ``securitySchemes``: HTTP bearer (an API key of the door's ``[credentials]``,
  or an access token when ``[a2a.jwt]`` is set), and OpenID Connect naming the
  identity provider when ``[a2a.jwt]`` names its ``issuer``;
* ``capabilities``: streaming; no push notifications, no extended card.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    OpenIdConnectSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from toolbus_a2a.serving.agents import ServedAgent

#: The protocol version the door speaks.
PROTOCOL_VERSION = "1.0"
#: The security schemes' names in cards.
BEARER = "bearer"
OPENID = "openid"
#: Tools a skill's description names at most.
NAMED_TOOLS = 20


def _version() -> str:
    try:
        return version("toolbus-a2a")
    except PackageNotFoundError:  # a checkout that was not installed
        return "0"


def agent_path(name: str) -> str:
    """Where the door serves agent ``name``."""
    return f"/agents/{name}"


def skills_of(agent: ServedAgent) -> list[AgentSkill]:
    skills = []
    for group, tools in agent.profile.groups.items():
        named = ", ".join(tool.name for tool in tools[:NAMED_TOOLS])
        more = len(tools) - NAMED_TOOLS
        described = f"Tools of group {group!r}: {named}" + (f" and {more} more" if more > 0 else "")
        skills.append(
            AgentSkill(
                id=group,
                name=group,
                description=described,
                tags=[group, *(tool.name for tool in tools[:NAMED_TOOLS])],
                examples=[tool.description for tool in tools[:3] if tool.description],
                input_modes=["text/plain", "application/json"],
                output_modes=["text/plain"],
            )
        )
    return skills


def _security(
    tokens: bool, issuer: str | None
) -> tuple[dict[str, SecurityScheme], list[SecurityRequirement]]:
    """The card's schemes, and its requirements (each one a way in)."""
    bearer = HTTPAuthSecurityScheme(
        scheme="Bearer",
        description="An API key of the door's [credentials] (toolbus.toml)"
        + (", or an access token of its identity provider ([a2a.jwt])" if tokens else ""),
    )
    if tokens:
        bearer.bearer_format = "JWT"
    schemes = {BEARER: SecurityScheme(http_auth_security_scheme=bearer)}
    if tokens and issuer is not None:
        schemes[OPENID] = SecurityScheme(
            open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                open_id_connect_url=f"{issuer.rstrip('/')}/.well-known/openid-configuration",
                description="The identity provider whose access tokens the door accepts",
            )
        )
    return schemes, [SecurityRequirement(schemes={name: StringList()}) for name in schemes]


def agent_card(
    agent: ServedAgent, public_url: str, *, tokens: bool = False, issuer: str | None = None
) -> AgentCard:
    """``agent``'s card, its interfaces under ``public_url`` (no trailing slash).
    ``tokens``: the door accepts an identity provider's access tokens, issued by
    ``issuer`` (when known)."""
    schemes, requirements = _security(tokens, issuer)
    base = f"{public_url.rstrip('/')}{agent_path(agent.name)}"
    profile = agent.profile
    return AgentCard(
        name=profile.name,
        description=profile.description or f"The toolbus agent {profile.name!r}",
        version=_version(),
        supported_interfaces=[
            AgentInterface(
                url=f"{base}/jsonrpc", protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION
            ),
            AgentInterface(
                url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version=PROTOCOL_VERSION
            ),
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=False
        ),
        security_schemes=schemes,
        security_requirements=requirements,
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=skills_of(agent),
    )
