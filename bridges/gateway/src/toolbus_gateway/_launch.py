"""What ``toolbus gateway`` was asked for, and the gateway it makes: the command's and its
worker processes' (``--workers``) alike."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolbus_gateway.gateway import Gateway

#: Seconds requests in flight may take to finish once the gateway is told to stop.
GRACEFUL_SHUTDOWN = 30


@dataclass(frozen=True, slots=True)
class GatewayArguments:
    """What ``toolbus gateway`` was asked for: enough for a worker process to build the same."""

    broker: str | None = None
    config: str | None = None
    live: bool = False
    listen: str | None = None
    sign_key: str | None = None
    no_access_control: bool = False
    cwd: str = "."
    #: The environment variable holding the console's session key, instead of
    #: ``console-key-env`` (the key ``--workers`` makes and shares with its workers).
    console_key_env: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> GatewayArguments:
        return cls(**json.loads(text))


def build_gateway(arguments: GatewayArguments) -> tuple[Gateway, str, int]:
    """The :class:`~toolbus_gateway.gateway.Gateway` the arguments describe, and where it
    listens. ConfigError and ValueError say what is wrong."""
    from toolbus._internal.web_server import parse_listen
    from toolbus.application.identity.bearer import Authenticator
    from toolbus.application.identity.credentials import load_credentials
    from toolbus.application.identity.signing import CallSigner
    from toolbus.runtime import seal_keys_of
    from toolbus.settings import load_settings
    from toolbus_gateway.gateway import Gateway
    from toolbus_gateway.settings import parse_gateway_settings

    config = None if arguments.config is None else Path(arguments.config)
    settings = load_settings(broker=arguments.broker, config=config)
    gateway_settings = parse_gateway_settings(settings.file.get("gateway"))
    if arguments.console_key_env is not None:
        gateway_settings = gateway_settings.model_copy(
            update={"console_key_env": arguments.console_key_env}
        )
    host, port = parse_listen(arguments.listen or gateway_settings.listen)
    base = Path(arguments.cwd)
    credentials = load_credentials(settings=settings.file, base_dir=base)
    authenticator = Authenticator.from_settings(
        credentials,
        gateway_settings.jwt,
        where="toolbus.toml [gateway.jwt]",
        door="toolbus gateway",
        base_dir=base,
    )
    source = arguments.sign_key or gateway_settings.sign_key
    signer = None if source is None else CallSigner.load(source, issuer="toolbus-gateway")
    if settings.config is None and not arguments.live:
        raise ValueError(
            "no tool configuration: pass --config PATH (or set TOOLBUS_CONFIG, or config "
            "in toolbus.toml), or --live to take tools from the bus"
        )
    served = Gateway(
        settings.broker,
        authenticator=authenticator,
        config=settings.config,
        live=arguments.live,
        settings=gateway_settings,
        settings_file=settings.file,
        broker_options=settings.broker_options,
        signer=signer,
        access_control=not arguments.no_access_control,
        base_dir=settings.file_path.parent if settings.file_path is not None else base,
        state=settings.state,
        state_options=settings.state_options,
        seal_keys=seal_keys_of(settings, base, door="toolbus gateway", url=settings.state),
    )
    return served, host, port


def http_parser() -> str:
    """The HTTP parser uvicorn serves with: httptools (C) when installed, else h11."""
    return "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
