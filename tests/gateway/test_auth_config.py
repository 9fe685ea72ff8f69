"""JWT settings that cannot work are refused at start, naming what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gateway.support import Signer
from toolbus.application.identity.bearer import Authenticator, JwtVerifier, TokenSettings
from toolbus.domain.errors import ConfigError
from toolbus_gateway import parse_gateway_settings

WHERE = "toolbus.toml [gateway.jwt]"
#: What a provider's keys need beside them (tests/gateway/test_jwt_audience.py checks that).
NAMES = {"issuer": "test-idp", "audience": "toolbus-gateway"}


def jwt_settings(**table: object) -> TokenSettings:
    settings = parse_gateway_settings({"jwt": table})
    assert settings.jwt is not None
    return settings.jwt


def test_a_short_hs256_secret_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError, match="use at least 32") as caught:
        JwtVerifier.from_settings(
            jwt_settings(**{"secret-env": "S"}), where=WHERE, environ={"S": "short-secret-123"}
        )
    assert "short-secret-123" not in str(caught.value)


def test_a_jwks_with_private_keys_is_refused(tmp_path: Path) -> None:
    signer = Signer.generate()
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [signer.rsa.as_dict(private=True)]}))
    settings = jwt_settings(**{"jwks-file": "jwks.json"}, **NAMES)
    with pytest.raises(ConfigError, match="holds private keys"):
        JwtVerifier.from_settings(settings, where=WHERE, base_dir=tmp_path)


def test_a_jwks_file_that_is_not_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "jwks.json").write_text('{"not": "keys"}')
    with pytest.raises(ConfigError, match="is not a JWKS document"):
        JwtVerifier.from_settings(
            jwt_settings(**{"jwks-file": "jwks.json"}, **NAMES), where=WHERE, base_dir=tmp_path
        )
    with pytest.raises(ConfigError, match="cannot read"):
        JwtVerifier.from_settings(
            jwt_settings(**{"jwks-file": "gone.json"}, **NAMES), where=WHERE, base_dir=tmp_path
        )


def test_jwt_settings_need_a_key_and_gateway_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="needs the keys tokens are signed with"):
        JwtVerifier.from_settings(jwt_settings(issuer="x"), where=WHERE)
    with pytest.raises(ConfigError) as caught:
        parse_gateway_settings({"max-sessions": 3, "call-timeout": -1})
    text = str(caught.value)
    assert "max-sessions" in text and "call-timeout" in text


def test_an_authenticator_needs_a_way_to_authenticate() -> None:
    with pytest.raises(ConfigError, match="no way to authenticate callers"):
        Authenticator()
