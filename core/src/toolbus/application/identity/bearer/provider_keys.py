"""An identity provider's signing keys: a JWKS file, or a JWKS URL kept up to date.

Every production identity provider rotates the keys it signs tokens with and
publishes them as a JWK Set at a URL (its ``jwks_uri``). :class:`ProviderKeys`
reads that URL with httpx and keeps what it read:

* for as long as the answer's HTTP caching headers say (``Cache-Control:
  max-age``, less ``Age``; else ``Expires``), within ``min_refresh`` and
  ``max_refresh``; ``refresh`` seconds when they say nothing. A background
  task fetches the keys again when they expire, asking with the ``ETag``
  (``If-None-Match``) so that unchanged keys cost a ``304``;
* when a token names a key id (``kid``) the set does not hold, the keys are
  fetched again at once, so a key the provider rotated to is taken up on its
  first token: no restart. Such fetches happen at most once per
  ``refetch_interval`` (tokens with made-up key ids cannot make the door hammer
  the provider), and tokens arriving meanwhile wait for the fetch under way;
* when the provider cannot be reached, the last good keys keep serving for
  ``max_stale`` seconds past their expiry while the task retries with backoff;
  after that tokens are refused (:class:`KeysUnavailable`) until a fetch
  succeeds. :meth:`ProviderKeys.readiness` says which it is, for ``/readyz``.

The URL is either given (``jwks-url``) or discovered from the issuer's OpenID
Provider metadata (``{issuer}/.well-known/openid-configuration``, whose
``issuer`` must be the one configured). Either must be ``https``, except on a
loopback host: keys read over plain HTTP could be anybody's.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Protocol

import anyio
import httpx
from anyio.abc import TaskGroup
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from toolbus._internal.secure_urls import plain_http_problem
from toolbus.application.identity.bearer.principal import KeysUnavailable
from toolbus.domain.errors import ConfigError, Problem

log = logging.getLogger("toolbus.identity")

#: A JWK Set larger than this is refused: no provider publishes megabytes of keys.
MAX_KEY_SET_BYTES = 1024 * 1024
DISCOVERY_PATH = "/.well-known/openid-configuration"


class KeySource(Protocol):
    """Where a verifier finds the keys tokens are signed with."""

    def key_set(self) -> KeySet:
        """The keys to verify with now; :class:`KeysUnavailable` when there are none to trust."""
        ...

    def knows(self, kid: str | None) -> bool:
        """Whether the keys at hand include ``kid``."""
        ...

    async def fetch_for(self, kid: str | None) -> bool:
        """Try to get the key ``kid`` (a token named it); whether the keys hold it now."""
        ...

    def readiness(self) -> tuple[bool, str]:
        """Whether tokens can be checked now, and what ``/readyz`` says about the keys."""
        ...


class StaticKeys:
    """A JWK Set read once (``jwks-file``): publish a new key in the file and restart."""

    def __init__(self, keys: KeySet, where: str = "the JWKS file") -> None:
        self._keys = keys
        self._kids = frozenset(key.kid for key in keys)
        self._where = where

    @classmethod
    def read(cls, path: str, *, base_dir: Path | None, where: str) -> StaticKeys:
        """The public keys in the JWKS document at ``path``; :class:`ConfigError` otherwise."""
        resolved = Path(path).expanduser()
        if not resolved.is_absolute() and base_dir is not None:
            resolved = base_dir / resolved
        try:
            text = resolved.read_bytes()
        except OSError as exc:
            message = f"cannot read {str(resolved)!r}: {exc.strerror or type(exc).__name__}"
            raise ConfigError([Problem(where, "jwks-file", message)]) from None
        try:
            keys = public_key_set(text)
        except ValueError as exc:
            raise ConfigError([Problem(where, "jwks-file", f"{str(resolved)!r} {exc}")]) from None
        return cls(keys, str(resolved))

    def key_set(self) -> KeySet:
        return self._keys

    def knows(self, kid: str | None) -> bool:
        return kid in self._kids

    async def fetch_for(self, kid: str | None) -> bool:
        return self.knows(kid)

    def readiness(self) -> tuple[bool, str]:
        return True, f"{len(self._kids)} key(s) from {self._where}"


def public_key_set(document: bytes | str) -> KeySet:
    """The keys of a JWK Set document; :class:`ValueError` saying what is wrong with it."""
    try:
        data = json.loads(document)
        keys = KeySet.import_key_set(data)
    except (ValueError, JoseError, KeyError, TypeError) as exc:
        reason = (exc.description or exc.error) if isinstance(exc, JoseError) else exc
        raise ValueError(f'is not a JWKS document ({{"keys": [...]}}): {reason}') from None
    if any(key.is_private for key in keys.keys):
        raise ValueError("holds private keys; only the public ones are needed")
    return keys


def key_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a place to read signing keys from, or None."""
    return plain_http_problem(url, risk="keys read that way could be anybody's")


def cache_lifetime(
    headers: Mapping[str, str], *, default: float, floor: float, ceiling: float
) -> float:
    """Seconds an answer with ``headers`` may be kept (RFC 9111: ``max-age`` less ``Age``,
    else ``Expires`` less ``Date``; ``no-store``/``no-cache``: as short as allowed)."""
    directives: dict[str, str] = {}
    for part in headers.get("cache-control", "").split(","):
        name, _, value = part.strip().partition("=")
        if name:
            directives[name.lower()] = value.strip().strip('"')
    lifetime: float | None = None
    if "no-store" in directives or "no-cache" in directives:
        lifetime = 0.0
    elif "max-age" in directives:
        try:
            lifetime = float(int(directives["max-age"])) - _seconds(headers.get("age"))
        except ValueError:
            lifetime = None
    elif "expires" in headers:
        expires = _date(headers.get("expires"))
        lifetime = 0.0 if expires is None else expires - (_date(headers.get("date")) or time.time())
    if lifetime is None:
        lifetime = default
    return min(max(lifetime, floor), ceiling)


class ProviderKeys:
    """An identity provider's JWK Set from a URL, cached, refreshed and refetched (see module).

    Use it as an async context manager: entering fetches the keys once
    (a failure is logged and retried, never raised) and starts the task
    that keeps them fresh.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        issuer: str | None = None,
        refresh: float = 300.0,
        max_stale: float = 86400.0,
        min_refresh: float = 30.0,
        max_refresh: float = 86400.0,
        refetch_interval: float = 10.0,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if (url is None) == (issuer is None):
            raise ValueError("give ProviderKeys a JWKS url, or the issuer to discover it from")
        for given in (url, None if issuer is None else issuer.rstrip("/") + DISCOVERY_PATH):
            problem = None if given is None else key_url_problem(given)
            if problem is not None:
                raise ValueError(problem)
        self._url = url
        self.issuer = issuer
        self._refresh = refresh
        self._max_stale = max_stale
        self._min_refresh = min_refresh
        self._max_refresh = max_refresh
        self._refetch_interval = refetch_interval
        self._timeout = timeout
        self._clock = clock
        self._transport = transport
        self._keys: KeySet | None = None
        self._kids: frozenset[str | None] = frozenset()
        self._etag: str | None = None
        self._fetched_at = -math.inf
        self._fresh_until = -math.inf
        self._failing_since: float | None = None
        self._error: str | None = None
        self._last_refetch = -math.inf
        self._in_flight: anyio.Event | None = None
        self._wake = anyio.Event()
        self._http: httpx.AsyncClient | None = None
        self._tasks: TaskGroup | None = None
        #: Fetches made (for tests and the curious): answered 200, answered 304, failed.
        self.fetches = {"new": 0, "unchanged": 0, "failed": 0}
        self._fetched = anyio.Event()

    @property
    def where(self) -> str:
        """The JWKS URL, or where it is discovered from."""
        if self._url is not None:
            return self._url
        assert self.issuer is not None
        return self.issuer.rstrip("/") + DISCOVERY_PATH

    async def __aenter__(self) -> ProviderKeys:
        if self._http is not None:
            raise RuntimeError("these ProviderKeys are in use already; give each door its own")
        self._http = httpx.AsyncClient(
            timeout=self._timeout,
            follow_redirects=False,
            transport=self._transport,
            headers={"accept": "application/jwk-set+json, application/json"},
        )
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        try:
            await self._fetch_once()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._tasks.start_soon(self._keep_fresh)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tasks, self._tasks = self._tasks, None
        try:
            if tasks is not None:
                tasks.cancel_scope.cancel()
                await tasks.__aexit__(None, None, None)
        finally:
            if self._http is not None:
                await self._http.aclose()
                self._http = None

    # ------------------------------------------------------------------ KeySource

    def key_set(self) -> KeySet:
        keys = self._keys
        if keys is None:
            raise KeysUnavailable(
                f"the identity provider's keys ({self.where}) could not be fetched yet: "
                f"{self._error or 'the first fetch is under way'}; try again shortly"
            )
        if self._clock() > self._fresh_until + self._max_stale:
            raise KeysUnavailable(
                f"the identity provider's keys ({self.where}) could not be refreshed for more "
                f"than keys-max-stale ({self._max_stale:g} s): {self._error}; try again later"
            )
        return keys

    def knows(self, kid: str | None) -> bool:
        return kid in self._kids

    async def fetch_for(self, kid: str | None) -> bool:
        if self.knows(kid) and self._usable():
            return True
        if self._in_flight is None:
            now = self._clock()
            if now - self._last_refetch < self._refetch_interval:
                return self.knows(kid)
            self._last_refetch = now
        await self._fetch_once()
        self._wake.set()  # the task reschedules after what was just fetched
        return self.knows(kid)

    def readiness(self) -> tuple[bool, str]:
        now = self._clock()
        if self._keys is None:
            return False, f"not fetched yet from {self.where}: {self._error or 'fetching'}"
        age = now - self._fetched_at
        count = f"{len(self._kids)} key(s) from {self.where}, fetched {age:.0f} s ago"
        if self._failing_since is None:
            return True, count
        left = self._fresh_until + self._max_stale - now
        if left < 0:
            return False, (
                f"{count}; the provider cannot be reached ({self._error}) and they are "
                f"older than keys-max-stale ({self._max_stale:g} s): tokens are refused"
            )
        return True, (
            f"{count}; the provider cannot be reached ({self._error}): they serve for "
            f"{left:.0f} s more"
        )

    async def next_fetch(self) -> None:
        """Wait until a fetch that has not ended yet ends (whatever its outcome)."""
        await self._fetched.wait()

    # ------------------------------------------------------------------ fetching

    def _usable(self) -> bool:
        return self._keys is not None and self._clock() <= self._fresh_until + self._max_stale

    async def _keep_fresh(self) -> None:
        backoff = 1.0
        while True:
            if self._failing_since is not None:
                wait = backoff
                backoff = min(backoff * 2, self._refresh)
            else:
                backoff = 1.0
                wait = self._fresh_until - self._clock()
            woken = self._wake
            with anyio.move_on_after(max(wait, 0.0)):
                await woken.wait()
            if woken.is_set():
                self._wake = anyio.Event()
                continue  # fetched meanwhile: reschedule from what it got
            await self._fetch_once()

    async def _fetch_once(self) -> None:
        """Fetch the keys, or wait for the fetch already under way."""
        in_flight = self._in_flight
        if in_flight is not None:
            await in_flight.wait()
            return
        done = self._in_flight = anyio.Event()
        try:
            await self._fetch()
        finally:
            self._in_flight = None
            done.set()
            fetched, self._fetched = self._fetched, anyio.Event()
            fetched.set()

    async def _fetch(self) -> None:
        http = self._http
        assert http is not None, "enter ProviderKeys (async with) before using it"
        try:
            url = await self._jwks_url(http)
            headers = {"if-none-match": self._etag} if self._etag and self._keys else {}
            async with http.stream("GET", url, headers=headers) as response:
                body = await _read(response, url)
            now = self._clock()
            lifetime = cache_lifetime(
                response.headers,
                default=self._refresh,
                floor=self._min_refresh,
                ceiling=self._max_refresh,
            )
            if response.status_code == 304 and self._keys is not None:
                self.fetches["unchanged"] += 1
            else:
                try:
                    keys = public_key_set(body)
                except ValueError as exc:
                    raise _FetchFailed(f"{url} {exc}") from None
                self._keys = keys
                self._kids = frozenset(key.kid for key in keys)
                self._etag = response.headers.get("etag")
                self.fetches["new"] += 1
        except (httpx.HTTPError, _FetchFailed) as exc:
            self.fetches["failed"] += 1
            self._error = _describe(exc)
            if self._failing_since is None:
                self._failing_since = self._clock()
            log.warning("cannot fetch the identity provider's keys: %s", self._error)
            return
        if self._failing_since is not None:
            log.info("fetched the identity provider's keys again from %s", url)
        self._fetched_at = now
        self._fresh_until = now + lifetime
        self._failing_since = None
        self._error = None

    async def _jwks_url(self, http: httpx.AsyncClient) -> str:
        if self._url is not None:
            return self._url
        assert self.issuer is not None
        where = self.where
        async with http.stream("GET", where, headers={"accept": "application/json"}) as response:
            body = await _read(response, where)
        try:
            metadata = json.loads(body)
        except ValueError:
            raise _FetchFailed(f"{where} is not JSON") from None
        if not isinstance(metadata, dict) or metadata.get("issuer") != self.issuer:
            found = metadata.get("issuer") if isinstance(metadata, dict) else None
            raise _FetchFailed(
                f"{where} names issuer {found!r}, not {self.issuer!r}: check issuer in the settings"
            )
        url = metadata.get("jwks_uri")
        if not isinstance(url, str):
            raise _FetchFailed(f"{where} names no jwks_uri")
        problem = key_url_problem(url)
        if problem is not None:
            raise _FetchFailed(f"{where}: jwks_uri {problem}")
        self._url = url
        return url


class _FetchFailed(Exception):
    """The provider answered, but not with what was asked for."""


async def _read(response: httpx.Response, url: str) -> bytes:
    if response.status_code not in (200, 304):
        hint = " (redirects are not followed: give the final URL)" if response.is_redirect else ""
        raise _FetchFailed(f"{url} answered HTTP {response.status_code}{hint}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_KEY_SET_BYTES:
            raise _FetchFailed(f"{url} answered more than {MAX_KEY_SET_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _FetchFailed):
        return str(exc)
    try:
        where = f" ({exc.request.url})" if isinstance(exc, httpx.RequestError) else ""
    except RuntimeError:  # no request attached
        where = ""
    return f"{type(exc).__name__}{where}: {exc}" if str(exc) else f"{type(exc).__name__}{where}"


def _seconds(value: str | None) -> float:
    try:
        return max(float(int(value or 0)), 0.0)
    except ValueError:
        return 0.0


def _date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
