"""Who may use what at a front door: the operator's permissions and entry states.

Permissions come from the operator's local files: ``toolbus.toml``'s
``[permissions]`` or the ``permissions`` section of the configuration given
locally (one of the two, as everywhere). Never from what the bus says: the
config service's items can be written by anyone who may publish, so a live
``permissions`` section is ignored, unless the operator opts in
(``[doors] live-permissions = [public keys]``) *and* the section is a document
signed by one of those keys (``{"signed": "<JWS>"}``,
:func:`toolbus.application.identity.documents.sign_document`). A signed
section replaces the local permissions while it is live; one that does not
verify is logged and ignored, and so is one older than a signed section
already taken.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from toolbus.application.identity.documents import PERMISSIONS_PURPOSE, DocumentVerifier
from toolbus.domain.access.permissions import (
    SECTION,
    Permissions,
    load_permissions,
    parse_permissions,
    signed_permissions,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, ToolbusError

log = logging.getLogger("toolbus.doors")


class AccessPolicy:
    """The permissions a door applies now: the local ones, or signed live ones when allowed.

    Args:
        local: the configuration given locally (a snapshot), or ``None``.
        settings: the parsed ``toolbus.toml``.
        live_keys: with the operator's opt-in, the verifier of signed live permissions.
    """

    def __init__(
        self,
        local: Mapping[str, Any] | None,
        settings: Mapping[str, Any] | None,
        *,
        live_keys: DocumentVerifier | None = None,
    ) -> None:
        #: Raises ConfigError now, so that a bad section stops the door's start.
        self.local: Permissions = load_permissions(local, settings)
        self._section_given = SECTION in (local or {}) or SECTION in (settings or {})
        self._live_keys = live_keys
        self._local_section = (local or {}).get(SECTION)
        self._signed: Permissions = self.local
        self._seen: tuple[Registry | None, Permissions] = (None, self.local)
        self._taken: tuple[str, float] | None = None
        self._refused: str | None = None

    @property
    def configured(self) -> bool:
        """Whether the operator configured access control: a permissions section exists
        (even one that lets everyone in: that was said, not forgotten), or signed live
        permissions are trusted."""
        return self._section_given or self._live_keys is not None

    def permissions(self, registry: Registry) -> Permissions:
        """The permissions for sessions on ``registry``; worked out once per registry."""
        seen, permissions = self._seen
        if seen is not registry:
            permissions = self._for(registry)
            self._seen = (registry, permissions)
        return permissions

    def _for(self, registry: Registry) -> Permissions:
        token = signed_permissions(registry.snapshot)
        if self._live_keys is None or token is None:
            if registry.snapshot.get(SECTION, self._local_section) != self._local_section:
                self._refuse_once(
                    "live",
                    "the permissions section on the bus is ignored: permissions come from "
                    "the local files, or, with live-permissions in [doors], from a signed item",
                )
            return self.local
        if self._taken is not None and self._taken[0] == token:
            return self._signed
        try:
            signed = self._live_keys.verify(token, purpose=PERMISSIONS_PURPOSE)
            if self._taken is not None and signed.issued_at < self._taken[1]:
                raise ToolbusError(
                    "it is older than the signed permissions already taken; sign a new one"
                )
            permissions = parse_permissions(signed.document, where="signed live permissions")
        except (ToolbusError, ConfigError) as exc:
            self._refuse_once(token, f"signed live permissions ignored: {exc}")
            return self._signed if self._taken is not None else self.local
        self._taken = (token, signed.issued_at)
        self._signed = permissions
        log.info("took signed live permissions (key %s)", signed.key_id)
        return permissions

    def _refuse_once(self, about: str, message: str) -> None:
        if self._refused != about:
            self._refused = about
            log.warning(message)
