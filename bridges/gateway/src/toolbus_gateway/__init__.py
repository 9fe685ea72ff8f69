"""toolbus-gateway: tools and agent sessions over HTTP for authenticated users, and a console.

Run it with ``toolbus gateway``, or build the ASGI app yourself::

    from toolbus.application.identity.bearer import Authenticator
    from toolbus_gateway import Gateway, create_app

    app = create_app(Gateway("nats://127.0.0.1:4222", config="config.json",
                             authenticator=Authenticator(credentials)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolbus._internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolbus_gateway.app import create_app
    from toolbus_gateway.gateway import Gateway
    from toolbus_gateway.settings import GatewaySettings, parse_gateway_settings

# FastAPI takes seconds to import: the package stays light until a name is used,
# so that loading the gateway's command (any toolbus command) does not pay for it.
__getattr__ = lazy_exports(
    __name__,
    {
        "create_app": "app",
        "Gateway": "gateway",
        "GatewaySettings": "settings",
        "parse_gateway_settings": "settings",
    },
)

__all__ = [
    "Gateway",
    "GatewaySettings",
    "create_app",
    "parse_gateway_settings",
]
