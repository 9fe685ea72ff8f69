"""The state a tool service hands the caller it asks for input: sealed, bound, short-lived.

When a tool asks, its service answers with the requests and a *state*: the
answers given so far and what the tool carries to its next call. The caller
gives the state back, unopened, with its answers; any replica of the service
opens it. So the state travels sealed (AES-GCM under the service's seal keys,
:class:`~toolbus.application.sealing.Cipher`), bound to the service, the user
and the call's config and arguments: a caller cannot read or alter it, nor
bring it to another call (a confirmation of ``delete a.txt`` does not open for
``delete b.txt``), nor use it after its time to live.

Every replica of a service must hold the same keys (``toolbus serve
--seal-key``, ``ServiceHost(seal_keys=...)``). A service given none makes a
key of its own at the first ask and says so once: its state then opens in
this process only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toolbus.application.sealing import Cipher, SealKey, SealKeys
from toolbus.domain.calls.input_requests import InvalidInputState
from toolbus.domain.identity import base64url

log = logging.getLogger("toolbus.service")

#: Seconds a state opens after it was sealed, unless the host says otherwise.
DEFAULT_STATE_TTL = 3600.0
#: What a state is bound to, besides the call (seals of other things never open as one).
_NAMESPACE = "toolbus-input-state"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class OpenedState:
    """What a state held: the answers so far (MCP's JSON, by key) and what the tool carried."""

    answers: dict[str, Any]
    carried: Any = None


class InputStates:
    """Seals and opens one service's input states; see the module docs."""

    def __init__(
        self,
        service: str,
        keys: SealKeys | None,
        *,
        ttl: float = DEFAULT_STATE_TTL,
        clock: Callable[[], float],
    ) -> None:
        self.service = service
        self.ttl = ttl
        self.clock = clock
        self._keys = keys
        self._cipher: Cipher | None = None

    def _sealer(self) -> Cipher:
        if self._cipher is None:
            keys = self._keys
            if keys is None:
                keys = SealKeys((SealKey("this-process", secrets.token_bytes(32)),))
                log.warning(
                    "%r asks its callers for input with no seal key: the state it hands them "
                    "opens in this process only, so an answer that reaches another replica (or "
                    "this one after a restart) is refused. Give every replica the same key: "
                    "toolbus keys new seal.jwk --algorithm A256GCM, then toolbus serve "
                    "--seal-key seal.jwk",
                    self.service,
                )
            self._cipher = Cipher(keys)
        return self._cipher

    def seal(
        self,
        user: str,
        config: Mapping[str, Any],
        arguments: Mapping[str, Any],
        answers: Mapping[str, Any],
        carried: Any,
    ) -> str:
        """The sealed state of a call that asks (``ValueError`` if ``carried`` is no JSON)."""
        payload = {"answers": dict(answers), "expires": self.clock() + self.ttl}
        if carried is not None:
            payload["carried"] = carried
        try:
            value = json.dumps(payload, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"what a tool carries to its next call must be JSON (dicts, lists, strings, "
                f"numbers): {exc}"
            ) from None
        sealed = self._sealer().seal(_NAMESPACE, self._binding(user, config, arguments), value)
        return base64url.encode(sealed).decode("ascii")

    def open(
        self, user: str, config: Mapping[str, Any], arguments: Mapping[str, Any], state: str
    ) -> OpenedState:
        """What ``state`` holds; :class:`InvalidInputState` saying why it does not open."""
        fix = "call the tool again without it, and answer what it asks"
        if not _BASE64URL.fullmatch(state):
            raise InvalidInputState(
                f"the input state given to {self.service!r} is malformed; {fix}"
            )
        try:
            value = self._sealer().open(
                _NAMESPACE, self._binding(user, config, arguments), base64url.decode(state)
            )
            payload = json.loads(value)
        except ValueError:
            raise InvalidInputState(
                f"the input state given to {self.service!r} does not open: it was altered, made "
                "for another call (other arguments, another user), or sealed with a key this "
                f"replica does not have; {fix}"
            ) from None
        expires = payload.get("expires") if isinstance(payload, dict) else None
        answers = payload.get("answers") if isinstance(payload, dict) else None
        if not isinstance(expires, int | float) or not isinstance(answers, dict):
            raise InvalidInputState(
                f"the input state given to {self.service!r} is malformed; {fix}"
            )
        if expires < self.clock():
            raise InvalidInputState(
                f"the input state given to {self.service!r} expired ({self.ttl:g} s after it "
                f"was made); {fix}"
            )
        return OpenedState(answers, payload.get("carried"))

    def _binding(self, user: str, config: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
        call = json.dumps([config, arguments], sort_keys=True, separators=(",", ":"), default=str)
        digest = hashlib.sha256(call.encode()).hexdigest()
        return f"{self.service}\n{user}\n{digest}"
