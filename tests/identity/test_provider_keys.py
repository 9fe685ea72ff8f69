"""An identity provider's keys by URL: cached as HTTP says, refetched for new key ids, kept
through an outage for a bounded time, against a real HTTP server the test controls."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from joserfc import jwt

from tests.support.jwks_server import JwksServer, es256_key, serving_jwks
from toolbus.application.identity.bearer import (
    JwtVerifier,
    KeysNotAtHand,
    KeysUnavailable,
    ProviderKeys,
    TokenSettings,
)
from toolbus.application.identity.bearer.provider_keys import cache_lifetime
from toolbus.domain.errors import ConfigError

pytestmark = pytest.mark.anyio

WHERE = "toolbus.toml [gateway.jwt]"


class Clock:
    """Monotonic seconds a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def fetches(keys: ProviderKeys, outcome: str, count: int) -> None:
    """Wait until ``count`` fetches have had ``outcome``."""
    with anyio.fail_after(10):
        while keys.fetches[outcome] < count:
            await keys.next_fetch()


@pytest.fixture
async def provider() -> AsyncIterator[JwksServer]:
    async with serving_jwks() as server:
        yield server


# ------------------------------------------------------------------ caching headers


@pytest.mark.parametrize(
    ("headers", "lifetime"),
    [
        ({"cache-control": "public, max-age=600"}, 600.0),
        ({"cache-control": "max-age=600", "age": "100"}, 500.0),
        ({"cache-control": 'max-age="90"'}, 90.0),
        (
            {"expires": "Thu, 01 Jan 2037 00:10:00 GMT", "date": "Thu, 01 Jan 2037 00:00:00 GMT"},
            600.0,
        ),
        ({"cache-control": "no-store, max-age=600"}, 30.0),
        ({"cache-control": "no-cache"}, 30.0),
        ({"cache-control": "max-age=5"}, 30.0),
        ({"cache-control": "max-age=9999999"}, 86400.0),
        ({"cache-control": "max-age=soon"}, 300.0),
        ({}, 300.0),
    ],
    ids=[
        "max-age",
        "less-age",
        "quoted",
        "expires",
        "no-store",
        "no-cache",
        "floor",
        "ceiling",
        "unreadable",
        "none",
    ],
)
def test_the_cache_lifetime_is_what_the_headers_say_within_bounds(
    headers: dict[str, str], lifetime: float
) -> None:
    assert cache_lifetime(headers, default=300, floor=30, ceiling=86400) == lifetime


async def test_the_keys_are_fetched_again_when_their_caching_headers_say(
    provider: JwksServer,
) -> None:
    provider.headers = {"cache-control": "max-age=1"}
    started = time.monotonic()
    async with ProviderKeys(provider.jwks_url, min_refresh=0.5, refresh=300) as keys:
        await fetches(keys, "new", 2)
        waited = time.monotonic() - started
    assert keys.fetches == {"new": 2, "unchanged": 0, "failed": 0}
    assert waited >= 0.9  # not before max-age said


async def test_unchanged_keys_cost_a_304(provider: JwksServer) -> None:
    provider.headers = {"cache-control": "max-age=1"}
    provider.etag = '"v1"'
    async with ProviderKeys(provider.jwks_url, min_refresh=0.5) as keys:
        before = keys.key_set()
        await fetches(keys, "unchanged", 1)
        assert keys.key_set() is before
    [first, second] = provider.key_requests()[:2]
    assert "if-none-match" not in first and second["if-none-match"] == '"v1"'
    assert keys.fetches["new"] == 1


# ------------------------------------------------------------------ new key ids


async def test_a_key_id_not_at_hand_fetches_the_keys_at_once_but_only_so_often(
    provider: JwksServer,
) -> None:
    old = provider.keys[0]
    async with ProviderKeys(provider.jwks_url, refetch_interval=3600) as keys:
        assert keys.knows(old.kid) and len(provider.key_requests()) == 1
        new = es256_key()
        provider.keys = [new, old]  # the provider rotated

        found = await keys.fetch_for(new.kid)
        made_up = await keys.fetch_for("made-up")

    assert found is True and keys.knows(new.kid)
    assert made_up is False
    assert len(provider.key_requests()) == 2  # the made-up key id fetched nothing


async def test_tokens_naming_a_new_key_at_the_same_time_share_one_fetch(
    provider: JwksServer,
) -> None:
    async with ProviderKeys(provider.jwks_url, refetch_interval=3600) as keys:
        new = es256_key()
        provider.keys = [new, *provider.keys]
        provider.hold = anyio.Event()
        found: list[bool] = []

        async def ask() -> None:
            found.append(await keys.fetch_for(new.kid))

        async with anyio.create_task_group() as tasks:
            for _ in range(5):
                tasks.start_soon(ask)
            await provider.requested(2)
            await anyio.wait_all_tasks_blocked()
            provider.hold.set()

    assert found == [True] * 5
    assert len(provider.key_requests()) == 2


async def test_a_rotated_key_verifies_on_its_first_token(provider: JwksServer) -> None:
    verifier = JwtVerifier(
        keys=ProviderKeys(provider.jwks_url),
        issuer="https://login.example",
        audiences=["https://tools.example"],
    )
    new = es256_key()
    claims = {
        "sub": "alice",
        "iss": "https://login.example",
        "aud": "https://tools.example",
        "exp": int(time.time()) + 300,
    }
    token = jwt.encode({"alg": "ES256", "kid": new.kid}, claims, new)
    async with verifier:
        with pytest.raises(KeysNotAtHand):
            verifier.verify(token)  # the keys at hand do not have it yet
        provider.keys = [new, *provider.keys]
        caller = await verifier.verify_fetching(token)
    assert caller.user == "alice" and caller.method == "jwt"


# ------------------------------------------------------------------ the provider down


async def test_an_outage_keeps_the_last_keys_for_max_stale_then_refuses(
    provider: JwksServer,
) -> None:
    clock = Clock()
    provider.headers = {"cache-control": "max-age=10"}
    keys = ProviderKeys(provider.jwks_url, min_refresh=1, max_stale=60, clock=clock)
    async with keys:
        good = keys.key_set()
        provider.status = 503
        clock.now += 12  # expired: the refresh fails
        await keys.fetch_for("any")
        ready, said = keys.readiness()
        assert ready and "cannot be reached" in said and "503" in said
        assert keys.key_set() is good

        clock.now += 60  # past expiry plus max-stale
        assert keys.readiness()[0] is False
        assert "keys-max-stale" in keys.readiness()[1]
        with pytest.raises(KeysUnavailable, match="keys-max-stale"):
            keys.key_set()

        provider.status = 200  # back
        clock.now += 11
        await keys.fetch_for("any")
        assert keys.readiness() == (True, f"1 key(s) from {provider.jwks_url}, fetched 0 s ago")
        assert keys.key_set() is not good


async def test_no_keys_yet_is_keys_unavailable_not_a_bad_token() -> None:
    async with serving_jwks() as provider:
        provider.status = 500
        verifier = JwtVerifier(
            keys=ProviderKeys(provider.jwks_url), issuer="https://i.example", audiences=["a"]
        )
        key = es256_key()
        token = jwt.encode(
            {"alg": "ES256", "kid": key.kid},
            {"sub": "a", "iss": "https://i.example", "aud": "a", "exp": int(time.time()) + 60},
            key,
        )
        async with verifier:
            assert verifier.readiness() == (
                False,
                f"not fetched yet from {provider.jwks_url}: {provider.jwks_url} answered HTTP 500",
            )
            with pytest.raises(KeysUnavailable, match="could not be fetched yet"):
                await verifier.verify_fetching(token)


# ------------------------------------------------------------------ where the keys are


async def test_discovery_takes_the_keys_url_from_the_issuer_s_metadata(
    provider: JwksServer,
) -> None:
    async with ProviderKeys(issuer=provider.url) as keys:
        assert keys.knows(provider.keys[0].kid)
    assert [request["path"] for request in provider.requests] == [
        "/.well-known/openid-configuration",
        "/jwks",
    ]


async def test_metadata_that_names_another_issuer_is_not_trusted(provider: JwksServer) -> None:
    provider.issuer = "https://someone-else.example"
    async with ProviderKeys(issuer=provider.url) as keys:
        ready, said = keys.readiness()
    assert not ready
    assert "names issuer 'https://someone-else.example'" in said
    assert provider.key_requests() == []


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"not json", "is not a JWKS document"),
        (b'{"keys": []}', "is not a JWKS document"),
        (b"private", "holds private keys"),
        (b"x" * (1024 * 1024 + 1), "more than 1048576 bytes"),
    ],
    ids=["not-json", "empty", "private", "oversized"],
)
async def test_an_answer_that_is_not_a_public_key_set_keeps_the_last_keys(
    provider: JwksServer, body: bytes, complaint: str
) -> None:
    async with ProviderKeys(provider.jwks_url, refetch_interval=0) as keys:
        good = keys.key_set()
        if body == b"private":
            body = json.dumps({"keys": [es256_key().as_dict(private=True)]}).encode()
        provider.body = body
        await keys.fetch_for("new")
        ready, said = keys.readiness()
        assert ready and complaint in said
        assert keys.key_set() is good


@pytest.mark.parametrize(
    ("table", "field", "complaint"),
    [
        ({"jwks-url": "http://login.example/jwks"}, "jwks-url", "is plain HTTP"),
        ({"jwks-url": "ftp://login.example/jwks"}, "jwks-url", "is not an http(s) URL"),
        ({"discover": True, "issuer": "http://login.example"}, "issuer", "is plain HTTP"),
        ({"discover": True, "issuer": None}, "issuer", "is required with discover"),
        ({"jwks-url": "https://l.example/k", "discover": True}, "discover", "not several"),
        ({"jwks-url": "https://l.example/k", "audience": None}, "audience", "is required"),
        (
            {"secret-env": "S", "resource": "https://t.example", "issuer": None},
            "resource",
            "issuer",
        ),
    ],
    ids=["plain-http", "not-http", "plain-issuer", "no-issuer", "two", "no-audience", "resource"],
)
def test_token_tables_that_cannot_be_trusted_are_refused_naming_the_field(
    table: dict[str, object], field: str, complaint: str
) -> None:
    settings = TokenSettings.model_validate(
        {"issuer": "https://login.example", "audience": "toolbus", **table}
    )
    with pytest.raises(ConfigError) as refused:
        JwtVerifier.from_settings(settings, where=WHERE, environ={"S": "s" * 40})
    assert f"{WHERE} field '{field}': " in str(refused.value)
    assert complaint in str(refused.value)


def test_plain_http_keys_are_fine_on_this_machine() -> None:
    settings = TokenSettings.model_validate(
        {"jwks-url": "http://127.0.0.1:9/jwks", "issuer": "http://127.0.0.1:9", "audience": "a"}
    )
    verifier = JwtVerifier.from_settings(settings, where=WHERE)
    assert isinstance(verifier.keys, ProviderKeys)
