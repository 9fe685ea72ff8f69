"""base64url as JWS writes it (RFC 7515 section 2): no padding, read leniently.

The ``base64`` module's url-safe functions are ``binascii`` and a byte
translation behind two Python calls each; a signed call makes six of them
(the body digest on both sides, the claims and the signature), so they are
spelled out here with the same ``binascii`` calls.
"""

from __future__ import annotations

import binascii

_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def encode(data: bytes) -> bytes:
    """``data`` in base64url, without padding."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE).rstrip(b"=")


def decode(text: str) -> bytes:
    """What ``text`` (base64url, padded or not) encodes, read as ``base64.urlsafe_b64decode``
    reads it: characters outside the alphabet are skipped, as is surplus padding.

    Raises :class:`ValueError` for text that is not ASCII or whose length no
    base64 has.
    """
    return binascii.a2b_base64((text + "==").encode("ascii").translate(_FROM_URLSAFE))
