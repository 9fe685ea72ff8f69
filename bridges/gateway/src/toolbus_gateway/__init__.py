"""toolbus-gateway: tools and agent sessions over HTTP for authenticated users, and a console.

Run it with ``toolbus gateway``, or build the ASGI app yourself::

    from toolbus_gateway import Authenticator, Gateway, create_app

    app = create_app(Gateway("nats://127.0.0.1:4222", config="config.json",
                             authenticator=Authenticator(credentials)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolbus._internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolbus_gateway.app import create_app
    from toolbus_gateway.auth import Authenticator, AuthFailure, JwtVerifier, Principal
    from toolbus_gateway.gateway import Gateway
    from toolbus_gateway.settings import GatewaySettings, JwtSettings, parse_gateway_settings

# FastAPI takes seconds to import: the package stays light until a name is used,
# so that loading the gateway's command (any toolbus command) does not pay for it.
__getattr__ = lazy_exports(
    __name__,
    {
        "create_app": "app",
        "Authenticator": "auth",
        "AuthFailure": "auth",
        "JwtVerifier": "auth",
        "Principal": "auth",
        "Gateway": "gateway",
        "GatewaySettings": "settings",
        "JwtSettings": "settings",
        "parse_gateway_settings": "settings",
    },
)

__all__ = [
    "AuthFailure",
    "Authenticator",
    "Gateway",
    "GatewaySettings",
    "JwtSettings",
    "JwtVerifier",
    "Principal",
    "create_app",
    "parse_gateway_settings",
]
