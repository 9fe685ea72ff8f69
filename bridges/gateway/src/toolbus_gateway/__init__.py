"""toolbus-gateway: tools and agent sessions over HTTP for authenticated users, and a console.

Run it with ``toolbus gateway``, or build the ASGI app yourself::

    from toolbus_gateway import Authenticator, Gateway, create_app

    app = create_app(Gateway("nats://127.0.0.1:4222", config="config.json",
                             authenticator=Authenticator(credentials)))
"""

from toolbus_gateway.app import create_app
from toolbus_gateway.auth import Authenticator, AuthFailure, JwtVerifier, Principal
from toolbus_gateway.gateway import Gateway, Readiness
from toolbus_gateway.settings import GatewaySettings, JwtSettings, parse_gateway_settings

__all__ = [
    "AuthFailure",
    "Authenticator",
    "Gateway",
    "GatewaySettings",
    "JwtSettings",
    "JwtVerifier",
    "Principal",
    "Readiness",
    "create_app",
    "parse_gateway_settings",
]
