"""Verifying calls: a :class:`CallVerifier` decides who a request is really from.

Every way a token can be wrong ends in :class:`~toolbus.domain.errors.Unauthorized`
with a reason that never quotes the token: missing (where required), malformed,
signed by an unknown key or with another algorithm than the key's, a signature
that does not verify, or claims that do not fit the call (see
:mod:`toolbus.domain.identity.claims`).

On an at-least-once queue a call may wait for its service (an outage, a
backlog) longer than its token lives. Where the broker says when it took the
call, the token is checked as of that moment, so a call is never refused for
having waited; what waited longer than ``max_queue_age`` is not served but
ends in :class:`~toolbus.domain.errors.QueuedTooLong`, for the service host to
move to the queue's dead letters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from toolbus.application.identity.keys import (
    SigningKeyError,
    algorithm_for,
    as_key,
    jose,
    load_keys,
    verifies_with,
)
from toolbus.application.identity.replays import (
    DEFAULT_REPLAY_MEMORY,
    InProcessReplays,
    ReplayGuard,
)
from toolbus.domain.calls.wire import PROP_ATTEMPT
from toolbus.domain.errors import QueuedTooLong, Unauthorized
from toolbus.domain.identity import Caller, base64url, check_claims

if TYPE_CHECKING:
    from joserfc.jwk import Key

#: Seconds of clock difference between a caller and a service that are forgiven.
DEFAULT_LEEWAY = 5.0
#: Seconds a signed call may wait in an at-least-once queue and still be served.
DEFAULT_MAX_QUEUE_AGE = 3600.0

UNSIGNED = (
    "the call carries no call token, and this service serves signed calls only; "
    "callers must sign with a trusted key (TrustGraph callers cannot: serve them from "
    "a service that does not require tokens)"
)


#: Distinct token headers whose checks are remembered (one per signer and key in practice).
_HEADERS_KEPT = 64

REPLAYED = "call token was used before; every call needs a token of its own"


def _shown(value: object) -> str:
    """An attacker-chosen header value, short enough to log and answer."""
    return repr(value)[:64]


class CallVerifier:
    """Checks call tokens with a set of trusted keys (key objects or JWK dicts), by key id.

    ``required`` (the default): a call without a token is refused. Otherwise
    unsigned calls are served unverified (a rollout step), while a token that
    is present must still be valid.

    ``max_queue_age``: seconds a signed call may have waited in an
    at-least-once queue (by the broker's timestamp) and still be served; its
    token is checked as of when the broker took it.

    ``replays``: where the token uses taken on at-most-once queues are
    remembered (:mod:`toolbus.application.identity.replays`); by default in
    this process (``replay_memory`` of them at most). ``max_token_age``: on
    at-most-once queues, refuse a token signed longer ago than this many
    seconds, whatever its expiry (what a per-replica guard is paired with).
    """

    def __init__(
        self,
        keys: Iterable[Key | Mapping[str, Any]],
        *,
        required: bool = True,
        leeway: float = DEFAULT_LEEWAY,
        clock: Callable[[], float] = time.time,
        replay_memory: int = DEFAULT_REPLAY_MEMORY,
        max_queue_age: float = DEFAULT_MAX_QUEUE_AGE,
        replays: ReplayGuard | None = None,
        max_token_age: float | None = None,
    ) -> None:
        if not max_queue_age > 0:
            raise ValueError(f"max_queue_age is {max_queue_age}; it must be a positive number")
        self._signatures = Signatures(keys, what="call token")
        self.required = required
        self.leeway = leeway
        self.clock = clock
        self.replay_memory = replay_memory
        self.max_queue_age = max_queue_age
        self.max_token_age = max_token_age
        #: Token uses taken in this process (what :meth:`verify` checks).
        self._in_process = InProcessReplays(replay_memory)
        #: Where :meth:`verify_call` takes token uses.
        self.replays: ReplayGuard = self._in_process if replays is None else replays

    @classmethod
    def load(
        cls,
        sources: Iterable[str],
        *,
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> CallVerifier:
        """A verifier trusting every key in ``sources`` (files, or ``env:NAME``)."""
        return cls(load_keys(sources, environ), **options)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return self._signatures.key_ids

    def verify(
        self,
        token: str | None,
        *,
        call_id: str,
        audiences: Collection[str],
        user: str,
        body: bytes,
        once: bool = False,
        properties: Mapping[str, str] | None = None,
        enqueued_at: float | None = None,
    ) -> Caller:
        """The caller of one request, or :class:`Unauthorized`.

        ``once``: the request queue delivers at most once, so a token seen
        before is a replay (on an at-least-once queue it is a redelivery, which
        the service host answers from its memory of answers). A retry is not a
        replay: it is sent with a fresh token for its own ``attempt``.
        ``properties``: the message's, whose steering ones the token must cover.
        ``enqueued_at``: when the broker took the call (its own clock, Unix
        seconds), if it says; on an at-least-once queue the token is checked as
        of then, and a call older than ``max_queue_age`` raises
        :class:`QueuedTooLong`.
        """
        caller, use = self._checked(
            token,
            call_id=call_id,
            audiences=audiences,
            user=user,
            body=body,
            once=once,
            properties=properties,
            enqueued_at=enqueued_at,
        )
        if use is not None and not self._in_process.take(*use):
            raise Unauthorized(REPLAYED)
        return caller

    async def verify_call(
        self,
        token: str | None,
        *,
        call_id: str,
        audiences: Collection[str],
        user: str,
        body: bytes,
        once: bool = False,
        properties: Mapping[str, str] | None = None,
        enqueued_at: float | None = None,
    ) -> Caller:
        """:meth:`verify`, taking the token's use through :attr:`replays` (which may be
        a state store every replica shares): what a service host calls."""
        caller, use = self._checked(
            token,
            call_id=call_id,
            audiences=audiences,
            user=user,
            body=body,
            once=once,
            properties=properties,
            enqueued_at=enqueued_at,
        )
        if use is not None:
            replays = self.replays
            # This process's memory answers at once: no coroutine made per call for it.
            if replays is self._in_process:
                fresh = self._in_process.take(*use)
            else:
                fresh = await replays.first_use(*use)
            if not fresh:
                raise Unauthorized(REPLAYED)
        return caller

    def _checked(
        self,
        token: str | None,
        *,
        call_id: str,
        audiences: Collection[str],
        user: str,
        body: bytes,
        once: bool,
        properties: Mapping[str, str] | None,
        enqueued_at: float | None,
    ) -> tuple[Caller, tuple[str, float, float] | None]:
        """The caller, and the use to take (``None`` where a token is not used once)."""
        if token is None:
            if self.required:
                raise Unauthorized(UNSIGNED)
            return Caller(user), None
        key_id, claims = self._signatures.verified(token)
        now = self.clock()
        # At-most-once queues hold nothing back: there "now" is when it was sent.
        valid_at = now if once or enqueued_at is None else enqueued_at
        caller = check_claims(
            claims,
            audiences=audiences,
            call_id=call_id,
            user=user,
            body=body,
            now=valid_at,
            leeway=self.leeway,
            key_id=key_id,
            properties=properties,
        )
        if valid_at != now and now - valid_at > self.max_queue_age:
            age = now - valid_at
            raise QueuedTooLong(
                f"the call waited {age:.0f} s in the queue, longer than this service's maximum "
                f"queue age of {self.max_queue_age:g} s; it was not run",
                age=age,
                limit=self.max_queue_age,
            )
        if not once:
            return caller, None
        issued = float(claims.get("iat", 0))
        if self.max_token_age is not None and now - issued > self.max_token_age + self.leeway:
            raise Unauthorized(
                f"call token was signed {now - issued:.0f} s ago; this service takes tokens for "
                f"{self.max_token_age:g} s only, as it remembers replays per replica"
            )
        attempt = properties.get(PROP_ATTEMPT, "") if properties else ""
        # The token's id (the call id), its issue time and the try: a retry is signed
        # afresh for its own attempt, a copy of one try is a replay.
        use = f"{call_id} {claims.get('iat', '')} {attempt}"
        return caller, (use, float(claims["exp"]) + self.leeway, now)

    def __repr__(self) -> str:
        return f"<CallVerifier keys={list(self.key_ids)!r} required={self.required}>"


class Signatures:
    """Trusted keys by key id, and the check of a JWS compact token against them.

    Shared by every verifier of signed things (call tokens, signed configuration):
    the token must name a known key, use that key's one algorithm, and verify.
    Every failure is :class:`~toolbus.domain.errors.Unauthorized`, naming ``what``
    was refused and never quoting the token. A header that passed every check is
    remembered by its exact bytes (up to 64 of them), so that a signer's further
    tokens cost their signature and parsing only.
    """

    def __init__(self, keys: Iterable[Key | Mapping[str, Any]], *, what: str) -> None:
        _, jws = jose()
        self.what = what
        self._keys: dict[str, Key] = {}
        self._algorithms: dict[str, str] = {}
        for given in keys:
            key = as_key(given)
            key.ensure_kid()
            kid = str(key.kid)
            if kid in self._keys:
                raise SigningKeyError(f"key id {kid!r} is given twice; every key needs its own")
            self._keys[kid] = key
            self._algorithms[kid] = algorithm_for(key)
        if not self._keys:
            raise SigningKeyError("a verifier needs at least one key")
        self._registries = {a: jws.JWSRegistry(algorithms=[a]) for a in self._algorithms.values()}
        self._extract = jws.extract_compact
        # The library's own limit on a whole token.
        limits = jws.JWSRegistry
        self._longest = (
            limits.max_header_length + limits.max_payload_length + limits.max_signature_length
        )
        #: Header segments checked before -> what signed them: the key id, and what checks
        #: a signature with that key. A signer sends the same header on every token, so
        #: the header's parsing and checks are done once per signer, not once per token.
        self._headers: dict[str, tuple[str, Callable[[bytes, bytes], bool]]] = {}

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def verified(self, token: str) -> tuple[str, dict[str, Any]]:
        """The signing key's id and the token's JSON payload, once the signature verifies."""
        what = self.what
        signing_input, _, signature_segment = token.rpartition(".")
        header_segment, _, payload_segment = signing_input.partition(".")
        signer = self._headers.get(header_segment)
        if len(token) > self._longest:
            raise Unauthorized(f"{what} is malformed (longer than any token this library takes)")
        if signer is None or "." in payload_segment:
            signer = self._signer(token)
            if len(self._headers) < _HEADERS_KEPT:
                self._headers[header_segment] = signer
        key_id, verify = signer
        try:
            # Read as leniently as PyJWT reads it: another spelling of a signature
            # is still that signature, and a use is remembered by call, not by token.
            valid = verify(signing_input.encode(), base64url.decode(signature_segment))
        except Exception:
            valid = False
        if not valid:
            raise Unauthorized(f"{what}'s signature does not verify with key {key_id!r}")
        try:
            # The signature covers the segment as sent, so it is read as leniently
            # too; orjson reads it in a third of json's time.
            payload = orjson.loads(base64url.decode(payload_segment))
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            raise Unauthorized(f"{what}'s claims are not a JSON object")
        return key_id, payload

    def _signer(self, token: str) -> tuple[str, Callable[[bytes, bytes], bool]]:
        """The key id of a token whose header is new, and what checks its signature with
        that key: every check of the header and key."""
        what = self.what
        try:
            header = self._extract(token.encode()).headers()
        except Exception:
            raise Unauthorized(f"{what} is malformed (not a JWS compact token)") from None
        key_id = header.get("kid")
        key = self._keys.get(key_id) if isinstance(key_id, str) else None
        if key is None:
            raise Unauthorized(
                f"{what} is signed by an unknown key (kid {_shown(key_id)}); "
                "add the signer's public key to the verification keys"
            )
        algorithm = self._algorithms[key_id]
        if header.get("alg") != algorithm:
            raise Unauthorized(
                f"{what}'s algorithm {_shown(header.get('alg'))} is not key "
                f"{key_id!r}'s ({algorithm})"
            )
        registry = self._registries[algorithm]
        try:
            # What the library checks of a header and key before it verifies.
            registry.check_header(header)
            if header.get("b64", True) is not True:
                raise ValueError("unencoded payloads are not call tokens")
            model = registry.get_alg(algorithm)
            model.check_key(key)
            verify = verifies_with(key, model)
        except Exception:
            raise Unauthorized(f"{what}'s signature does not verify with key {key_id!r}") from None
        return key_id, verify
