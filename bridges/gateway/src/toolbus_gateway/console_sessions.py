"""The console's own log-in sessions: a signed, expiring cookie, revoked on log-out.

Logging in to the console with an API key or a JWT does not put that
credential in the browser. The gateway issues a console session instead: a
JWT (HS256, joserfc) naming the user, how they logged in, a random session id
and a CSRF token, valid for ``console-session-ttl`` seconds. Logging out
revokes the session id until it would have expired anyway: in the gateway's
state store (``state`` in ``toolbus.toml``) when it has one, so that every
replica refuses the cookie, else in this process. The signing key
is ``console-key-env``'s value, shared by replicas, or else a random key of
this process (a restart then logs everyone out).

Forms are protected from cross-site requests twice: the cookies are
``SameSite=Strict``, and every form carries a CSRF token that must match the
one the gateway set (a cookie of its own before log-in, the session's after).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import OctKey

from toolbus.application.identity.bearer.principal import Method, Principal
from toolbus.application.identity.bearer.tokens import MIN_HS256_SECRET
from toolbus.application.identity.credentials import read_secret
from toolbus.ports import StateStore
from toolbus_gateway.settings import GatewaySettings

#: The console's session cookie (the session itself, never a credential).
SESSION_COOKIE = "toolbus_console"
#: The CSRF token of the log-in form, before there is a session.
LOGIN_CSRF_COOKIE = "toolbus_console_login"
#: Only the console's own paths receive the cookies.
COOKIE_PATH = "/console"
_ALGORITHM = "HS256"
#: The state store namespace of logged-out console sessions.
LOGOUTS = "console-logouts"


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """A logged-in console user."""

    principal: Principal
    session_id: str
    csrf: str
    expires: float


class ConsoleSessions:
    """Issues, reads and revokes console sessions."""

    def __init__(
        self,
        key: OctKey,
        ttl: float,
        *,
        tls_proxy_header: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = key
        self.ttl = ttl
        self.tls_proxy_header = tls_proxy_header.lower() if tls_proxy_header else None
        self._clock = clock
        #: Revoked session id -> when it expires (then it is forgotten).
        self._revoked: dict[str, float] = {}

    @classmethod
    def from_settings(
        cls, settings: GatewaySettings, environ: Mapping[str, str] | None = None
    ) -> ConsoleSessions:
        """Sessions signed with ``console-key-env``'s key, else a fresh random one."""
        if settings.console_key_env is not None:
            secret = read_secret(
                env=settings.console_key_env,
                file=None,
                where="toolbus.toml [gateway] console-key-env",
                environ=environ,
                min_length=MIN_HS256_SECRET,
            )
            key = OctKey.import_key(secret.reveal())
        else:
            key = OctKey.generate_key(256)
        return cls(key, settings.console_session_ttl, tls_proxy_header=settings.tls_proxy_header)

    def issue(self, principal: Principal) -> tuple[str, ConsoleSession]:
        """A new session for ``principal``: the cookie value, and the session."""
        now = self._clock()
        session = ConsoleSession(
            principal, secrets.token_urlsafe(16), secrets.token_urlsafe(32), now + self.ttl
        )
        claims = {
            "sub": principal.user,
            "via": principal.method,
            "cred": principal.credential,
            "sid": session.session_id,
            "csrf": session.csrf,
            "iat": int(now),
            "exp": int(session.expires),
        }
        return jwt.encode({"alg": _ALGORITHM}, claims, self._key), session

    async def read(
        self, cookie: str | None, store: StateStore | None = None
    ) -> ConsoleSession | None:
        """The session ``cookie`` holds, or None: absent, forged, expired or logged out
        (here, or through any replica sharing ``store``)."""
        if not cookie:
            return None
        try:
            claims = jwt.decode(cookie, self._key, algorithms=[_ALGORITHM]).claims
        except (JoseError, ValueError):
            return None
        expires, session_id = claims.get("exp"), claims.get("sid")
        user, csrf = claims.get("sub"), claims.get("csrf")
        method, credential = claims.get("via"), claims.get("cred")
        if not isinstance(expires, int) or expires <= self._clock():
            return None
        if not all(isinstance(v, str) and v for v in (session_id, user, csrf, method)):
            return None
        if session_id in self._revoked:
            return None
        if store is not None and await store.get(LOGOUTS, str(session_id)) is not None:
            return None
        principal = Principal(
            str(user), cast(Method, method), credential if isinstance(credential, str) else ""
        )
        return ConsoleSession(principal, str(session_id), str(csrf), float(expires))

    async def revoke(self, session: ConsoleSession, store: StateStore | None = None) -> None:
        """Log ``session`` out: its cookie is refused from now on (by every replica
        sharing ``store``)."""
        now = self._clock()
        if store is not None and session.expires > now:
            await store.put(LOGOUTS, session.session_id, b"", ttl=session.expires - now)
        self._revoked = {sid: until for sid, until in self._revoked.items() if until > now}
        self._revoked[session.session_id] = session.expires

    def secure(self, scheme: str, headers: Mapping[str, str]) -> bool:
        """Whether the browser reached us over TLS: directly, or through a proxy that says so."""
        if scheme == "https":
            return True
        header = self.tls_proxy_header
        return header is not None and headers.get(header, "").strip().lower() == "https"


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def same_token(given: str | None, expected: str | None) -> bool:
    """Whether a form's CSRF token matches (in constant time); never for an empty one."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())
