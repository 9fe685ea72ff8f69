"""Verified identity on the bus: signed call tokens, and the caller a tool sees.

* :class:`CallSigner` signs a token onto every request a client sends
  (``ToolServiceClient(bus, signer=...)``); :func:`granting` sets the groups
  it vouches for around the calls of one request.
* :class:`CallVerifier` checks tokens on the service side
  (``ServiceHost(bus, service, verifier=...)``).
* :func:`current_caller` tells tool code who the call is for.
* :mod:`toolbus.application.identity.credentials`: the credential table that
  maps the API keys of callers outside Python to users.

Tokens are JWS (JWT) made with joserfc: ``pip install 'toolbus[signing]'``.
See docs/security.md.
"""

from toolbus.application.identity.caller import current_caller, granted_groups, granting
from toolbus.application.identity.keys import (
    SigningKeyError,
    generate_key,
    load_key,
    load_keys,
    private_jwk,
    public_jwk,
)
from toolbus.application.identity.signing import CallSigner
from toolbus.application.identity.verifying import CallVerifier
from toolbus.domain.identity import Caller

__all__ = [
    "CallSigner",
    "CallVerifier",
    "Caller",
    "SigningKeyError",
    "current_caller",
    "generate_key",
    "granted_groups",
    "granting",
    "load_key",
    "load_keys",
    "private_jwk",
    "public_jwk",
]
