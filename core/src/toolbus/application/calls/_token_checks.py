"""Who a served call is for: verified by its call token, or the body's word where nothing checks.

A host given a :class:`~toolbus.application.identity.CallVerifier` verifies every
call's token (bound to the call id, the service, the body, the properties that
steer the call and the user, and checked as of when the broker took the call;
see docs/security.md) before anything runs. Without one, a call is served as the
user its body names, unverified; a host that receives signed calls it cannot
check says so in the log, once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from toolbus.application.calls.service import ToolService
from toolbus.application.identity.verifying import CallVerifier
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.identity import PROP_CALL_TOKEN, Caller

log = logging.getLogger("toolbus.service")

#: Distinct users whose unverified Caller a host keeps, to make none per call.
_UNVERIFIED_CALLERS = 1024


class TokenChecks:
    """One service's checks of its callers."""

    def __init__(self, service: ToolService, verifier: CallVerifier | None) -> None:
        self.service = service
        self.verifier = verifier
        self._audiences = frozenset({service.id, service.request_queue})
        # A token seen twice on an at-most-once queue is a replay, not a redelivery.
        self._once = not parse_queue(service.request_queue).persistent
        self._warned_unverified = False
        #: The Caller of each user served unverified, by user (read on the per-call path).
        self.unverified: dict[str, Caller] = {}

    def unverified_caller(self, user: str) -> Caller:
        """``user``'s Caller for an unverified call, made once per user."""
        if len(self.unverified) >= _UNVERIFIED_CALLERS:
            self.unverified.clear()
        caller = self.unverified[user] = Caller(user)
        return caller

    async def identify(
        self,
        properties: Mapping[str, str],
        call_id: str,
        user: str,
        body: bytes,
        enqueued_at: float | None = None,
    ) -> Caller:
        """Who the call is for: verified by its token, or the body's word where not checked.

        ``enqueued_at`` is the broker's timestamp on the delivery, if any. Raises
        :class:`~toolbus.domain.errors.Unauthorized` for a call the verifier
        refuses, :class:`~toolbus.domain.errors.QueuedTooLong` for one that
        waited in its queue beyond the verifier's maximum queue age.
        """
        token = properties.get(PROP_CALL_TOKEN)
        verifier = self.verifier
        if verifier is not None:
            return await verifier.verify_call(
                token,
                call_id=call_id,
                audiences=self._audiences,
                user=user,
                body=body,
                once=self._once,
                properties=properties,
                enqueued_at=enqueued_at,
            )
        if token is not None and not self._warned_unverified:
            self._warned_unverified = True
            log.warning(
                "%r receives signed calls but verifies no tokens: it serves unsigned calls "
                "from anyone who can publish to %s as whichever user they name; give it "
                "verification keys (ServiceHost verifier=, toolbus serve --verify-key)",
                self.service.id,
                self.service.request_queue,
            )
        return Caller(user)
