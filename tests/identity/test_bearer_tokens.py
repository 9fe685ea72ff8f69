"""An identity provider's access tokens: audience (RFC 8707), scopes onto tool groups, and the
challenges that tell a client what to do (RFC 6750, RFC 9728)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet

from tests.support.jwks_server import es256_key
from toolbus.application.identity.bearer import (
    Authenticator,
    AuthFailure,
    InsufficientScope,
    JwtVerifier,
    Principal,
    ProtectedResource,
    TokenSettings,
    challenge,
)
from toolbus.application.identity.bearer.principal import scopes_reaching
from toolbus.application.identity.bearer.tokens import accepted_audiences, token_scopes

ISSUER = "https://login.example/realms/tools"
RESOURCE = "https://tools.example/mcp"
SCOPES = {
    "tools:read": ("default",),
    "tools:research": ("research", "default"),
    "tools:admin": ("*",),
}
KEY = es256_key()


def verifier(**options: Any) -> JwtVerifier:
    return JwtVerifier(
        keys=KeySet([KEY]),
        issuer=ISSUER,
        audiences=options.pop("audiences", accepted_audiences(TokenSettings(resource=RESOURCE))),
        scopes=options.pop("scopes", SCOPES),
        **options,
    )


def token(**claims: Any) -> str:
    body = {"sub": "alice", "iss": ISSUER, "aud": RESOURCE, "exp": int(time.time()) + 300}
    body.update(claims)
    body = {name: value for name, value in body.items() if value is not None}
    return jwt.encode({"alg": "ES256", "kid": KEY.kid}, body, KEY)


@pytest.mark.parametrize(
    "audience",
    [RESOURCE, RESOURCE + "/", [RESOURCE, "https://other.example"]],
    ids=["exact", "trailing-slash", "one-of-several"],
)
def test_a_token_naming_this_door_s_resource_passes(audience: Any) -> None:
    caller = verifier().verify(token(aud=audience, scope="tools:read"))
    assert caller == Principal(
        "alice",
        "jwt",
        ISSUER,
        scopes=frozenset({"tools:read"}),
        reach=frozenset({"default"}),
        scope_groups=SCOPES,
    )


@pytest.mark.parametrize(
    "audience",
    ["https://tools.example/other", "https://tools.example", "account", None],
    ids=["another-door", "the-host-only", "another-app", "none"],
)
def test_a_token_for_another_resource_is_refused_naming_the_one_it_must_name(
    audience: Any,
) -> None:
    with pytest.raises(AuthFailure) as refused:
        verifier().verify(token(aud=audience))
    assert refused.value.reason == "invalid-token"
    assert "'aud'" in refused.value.message
    if audience is not None:
        assert repr(RESOURCE) in refused.value.message


@pytest.mark.parametrize(
    ("claims", "scopes"),
    [
        ({"scope": "tools:read tools:admin"}, {"tools:read", "tools:admin"}),
        ({"scp": "tools:read"}, {"tools:read"}),
        ({"scp": ["tools:read", 3, ""]}, {"tools:read"}),
        ({}, set()),
    ],
)
def test_scopes_come_from_scope_or_scp(claims: dict[str, Any], scopes: set[str]) -> None:
    assert token_scopes(claims) == scopes


def test_a_token_reaches_only_the_groups_its_scopes_map_to() -> None:
    reader = verifier().verify(token(scope="tools:read openid"))
    admin = verifier().verify(token(scope="tools:admin"))
    nothing = verifier().verify(token())
    unlimited = verifier(scopes={}).verify(token())

    reader.within(None)  # absent means default
    reader.within(["default"])
    reader.within([])
    admin.within(["admin", "*"])
    unlimited.within(["anything", "*"])
    with pytest.raises(InsufficientScope) as research:
        reader.within(["default", "research"])
    with pytest.raises(InsufficientScope) as everything:
        reader.within(["*"])
    with pytest.raises(InsufficientScope) as bare:
        nothing.within(None)

    assert research.value.denied == ("research",)
    assert research.value.scopes == ("tools:research",)  # a scope naming it before "*"
    assert "do not reach group(s) 'research'" in research.value.message
    assert everything.value.scopes == ("tools:admin",)
    assert bare.value.scopes == ("tools:read",)
    assert research.value.reason == "insufficient-scope"


def test_an_allowed_list_is_narrowed_to_what_the_scopes_reach() -> None:
    reader = verifier().verify(token(scope="tools:read"))
    admin = verifier().verify(token(scope="tools:admin"))
    assert reader.narrowed(["default", "research"]) == ("default",)
    assert reader.narrowed(["*"]) == ("default",)
    assert admin.narrowed(["default", "research"]) == ("default", "research")


@pytest.mark.parametrize(
    ("groups", "scopes"),
    [
        (None, ["tools:read"]),
        (["research"], ["tools:research"]),
        (["default", "research"], ["tools:research"]),
        (["admin"], ["tools:admin"]),
        (["*"], ["tools:admin"]),
        (["default", "admin"], ["tools:admin"]),
        (["elsewhere"], ["tools:admin"]),
        ([], []),
    ],
)
def test_the_fewest_scopes_that_reach_the_groups_are_named(
    groups: list[str] | None, scopes: list[str]
) -> None:
    assert scopes_reaching(SCOPES, groups) == scopes


def test_challenges_name_the_metadata_and_escape_what_they_quote() -> None:
    resource = ProtectedResource(RESOURCE, (ISSUER,), tuple(SCOPES))
    gate = Authenticator(jwt_verifier=verifier(), resource=resource)
    missing = AuthFailure("missing", "no credential")
    expired = AuthFailure("expired", "the token has expired")
    metadata = "https://tools.example/.well-known/oauth-protected-resource/mcp"

    assert gate.challenge(missing) == f'Bearer realm="toolbus", resource_metadata="{metadata}"'
    assert gate.challenge(expired, scopes=gate.scopes_for(["research"])) == (
        f'Bearer realm="toolbus", resource_metadata="{metadata}", error="invalid_token", '
        'error_description="expired", scope="tools:research"'
    )
    assert gate.challenge(InsufficientScope(["admin"], ["tools:admin"])) == (
        f'Bearer realm="toolbus", resource_metadata="{metadata}", '
        'error="insufficient_scope", error_description="insufficient-scope", scope="tools:admin"'
    )
    assert challenge(description='a "quoted" \\ text') == (
        'Bearer realm="toolbus", error_description="a \\"quoted\\" \\\\ text"'
    )


@pytest.mark.parametrize(
    ("resource", "paths", "url"),
    [
        (
            "https://tools.example/mcp",
            ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"),
            "https://tools.example/.well-known/oauth-protected-resource/mcp",
        ),
        (
            "https://tools.example:8443",
            ("/.well-known/oauth-protected-resource",),
            "https://tools.example:8443/.well-known/oauth-protected-resource",
        ),
    ],
)
def test_the_metadata_lives_where_rfc_9728_puts_it(
    resource: str, paths: tuple[str, ...], url: str
) -> None:
    described = ProtectedResource(resource, (ISSUER,), ("tools:read",), "toolbus gateway")
    assert described.metadata_paths == paths
    assert described.metadata_url == url
    assert described.document() == {
        "resource": resource,
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["tools:read"],
        "resource_name": "toolbus gateway",
    }


def test_a_door_with_a_resource_and_no_issuer_names_its_servers() -> None:
    settings = TokenSettings.model_validate(
        {"resource": RESOURCE, "authorization-servers": ["https://a.example", "https://b.example"]}
    )
    described = ProtectedResource.from_settings(settings, name="toolbus mcp serve")
    assert described is not None
    assert described.authorization_servers == ("https://a.example", "https://b.example")
    assert ProtectedResource.from_settings(TokenSettings(), name="x") is None


def test_groups_no_scope_reaches_add_no_scope() -> None:
    assert scopes_reaching({"tools:read": ("default",)}, ["default", "admin"]) == ["tools:read"]
    assert scopes_reaching({"tools:read": ("default",)}, ["admin"]) == []
