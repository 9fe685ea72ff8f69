"""Who is calling: the claims of a signed call token, and the checks a service makes.

Pure functions over plain values. Signing and verifying signatures happen in
:mod:`toolbus.application.identity`, with a JOSE library; what a verified token
must then say about the call it rides on is decided here.
"""

from toolbus.domain.identity.claims import (
    BOUND_PROPERTIES,
    CLAIM_BODY,
    CLAIM_GROUPS,
    CLAIM_PROPERTIES,
    PROP_CALL_TOKEN,
    Caller,
    body_digest,
    bound_properties,
    call_claims,
    check_claims,
)

__all__ = [
    "BOUND_PROPERTIES",
    "CLAIM_BODY",
    "CLAIM_GROUPS",
    "CLAIM_PROPERTIES",
    "PROP_CALL_TOKEN",
    "Caller",
    "body_digest",
    "bound_properties",
    "call_claims",
    "check_claims",
]
