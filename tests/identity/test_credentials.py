"""The credential table: API keys from variables and files, compared in constant time, hidden."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pytest

from toolbus.application.identity.credentials import (
    ApiKey,
    CredentialTable,
    Identity,
    Secret,
    bearer_token,
    load_credentials,
    parse_credentials,
)
from toolbus.domain.errors import ConfigError

ALICE_KEY = "alice-key-0123456789abcdef"
BOT_KEY = "bot-key-fedcba9876543210"


def _table(tmp_path: Path) -> CredentialTable:
    (tmp_path / "bot.key").write_text(BOT_KEY + "\n")
    section = {
        "api-keys": [
            {"user": "alice", "env": "ALICE_KEY", "label": "alice-laptop"},
            {"user": "ci-bot", "file": "bot.key"},
        ]
    }
    return parse_credentials(section, environ={"ALICE_KEY": ALICE_KEY}, base_dir=tmp_path)


def test_a_key_from_a_variable_or_a_file_names_its_user(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert table.authenticate(ALICE_KEY) == Identity("alice", "alice-laptop")
    assert table.authenticate(Secret(BOT_KEY)) == Identity("ci-bot", "ci-bot")
    assert table.users == {"alice", "ci-bot"}


@pytest.mark.parametrize("presented", [None, "", "wrong-key-0123456789abcdef", ALICE_KEY[:-1]])
def test_anything_else_authenticates_nobody(tmp_path: Path, presented: str | None) -> None:
    assert _table(tmp_path).authenticate(presented) is None


def test_the_table_keeps_digests_and_shows_no_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = _table(tmp_path)
    secret = Secret(ALICE_KEY)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info(
            "table %r secret %s %r %s", table, secret, secret, f"{secret}"
        )
    shown = caplog.text + repr(table) + repr(ApiKey.of("alice", ALICE_KEY))
    assert ALICE_KEY not in shown and BOT_KEY not in shown
    assert "***" in caplog.text
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)


def test_every_problem_is_reported_at_once_without_the_keys(tmp_path: Path) -> None:
    (tmp_path / "empty.key").write_text("\n")
    section = {
        "api-keys": [
            {"user": "alice", "env": "UNSET_VARIABLE"},
            {"user": "bob", "file": "missing.key"},
            {"user": "carol", "file": "empty.key"},
            {"user": "dave", "env": "SHORT"},
            {"user": "erin", "key": "inline-secret-0123456789"},
            {"user": "", "env": "ALICE_KEY"},
            {"user": "frank", "env": "ALICE_KEY", "file": "x"},
            "not an object",
        ],
        "api_keys": [],
    }
    with pytest.raises(ConfigError) as caught:
        parse_credentials(
            section, environ={"SHORT": "abc", "ALICE_KEY": ALICE_KEY}, base_dir=tmp_path
        )
    text = str(caught.value)
    assert "'UNSET_VARIABLE' is not set" in text
    assert "missing.key" in text and "No such file" in text
    assert "empty.key' is empty" in text
    assert "is 3 characters; use at least 16" in text
    assert "keys never go in configuration" in text
    assert "needs exactly one of 'env'" in text
    assert "'api_keys'" in text
    assert len(caught.value.problems) == 10
    assert "inline-secret" not in text and "abc" not in text.replace("abcdef", "")


def test_a_short_key_is_reported_naming_its_user_and_variable() -> None:
    section = {"api-keys": [{"user": "alice", "env": "ALICE_KEY"}, {"user": "dave", "env": "K"}]}
    with pytest.raises(ConfigError) as caught:
        parse_credentials(section, environ={"ALICE_KEY": ALICE_KEY, "K": "short-key"})

    (problem,) = caught.value.problems
    assert "user 'dave'" in str(problem) and "variable 'K'" in str(problem)
    assert "short-key" not in str(caught.value)


def test_two_users_with_one_key_are_refused(tmp_path: Path) -> None:
    section = {"api-keys": [{"user": "alice", "env": "K"}, {"user": "bob", "env": "K"}]}
    with pytest.raises(ConfigError, match="users 'alice' and 'bob' have the same key"):
        parse_credentials(section, environ={"K": ALICE_KEY})
    with pytest.raises(ConfigError, match="same key"):
        CredentialTable([ApiKey.of("alice", ALICE_KEY), ApiKey.of("bob", ALICE_KEY)])


def test_credentials_load_from_one_place_only() -> None:
    section = {"api-keys": [{"user": "alice", "env": "K"}]}
    env = {"K": ALICE_KEY}
    assert load_credentials({}, {}, environ=env) is None
    from_toml = load_credentials(None, {"credentials": section}, environ=env)
    assert from_toml is not None and from_toml.authenticate(ALICE_KEY) == Identity("alice", "alice")
    with pytest.raises(ConfigError, match="keep them in one place"):
        load_credentials({"credentials": section}, {"credentials": section}, environ=env)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer   abc  ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token_reads_the_authorization_header(header: str | None, token: str | None) -> None:
    found = bearer_token(header)
    assert (found.reveal() if found else None) == token


def test_read_secret_names_the_variable_not_the_value(tmp_path: Path) -> None:
    from toolbus.application.identity.credentials import read_secret

    assert read_secret(env="S", where="jwt", environ={"S": ALICE_KEY}).reveal() == ALICE_KEY
    (tmp_path / "s").write_text(BOT_KEY + "\n")
    assert read_secret(file="s", where="jwt", base_dir=tmp_path).reveal() == BOT_KEY
    with pytest.raises(ConfigError, match="'S' is not set"):
        read_secret(env="S", where="jwt", environ={})
    with pytest.raises(ConfigError, match="use at least 32") as caught:
        read_secret(env="S", where="jwt", environ={"S": ALICE_KEY}, min_length=32)
    assert ALICE_KEY not in str(caught.value)
    with pytest.raises(ConfigError, match="exactly one"):
        read_secret(where="jwt")
