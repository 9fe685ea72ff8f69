"""The permissions model: parsing, validation, the fallback, and the access check."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from toolbus.application.live.config_files import read_snapshot
from toolbus.domain.access.permissions import Permissions, load_permissions, parse_permissions
from toolbus.domain.errors import AccessDenied, ConfigError

SECTION: dict[str, Any] = {
    "users": {"alice": ["default", "research", "default"], "ops": ["*"]},
    "fallback": ["default"],
}

TOML = """
broker = "memory://"

[permissions]
fallback = []

[permissions.users]
alice = ["default", "research"]
ops = ["*"]
"""


def problems(error: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return [str(problem) for problem in error.value.problems]


def test_a_section_parses_into_users_and_fallback() -> None:
    permissions = parse_permissions(SECTION)
    assert permissions.users == {"alice": ("default", "research"), "ops": ("*",)}
    assert permissions.fallback == ("default",)
    assert permissions.allowed("alice") == ("default", "research")
    assert permissions.allowed("nobody") == ("default",)
    assert permissions.knows("alice") and not permissions.knows("nobody")


def test_toolbus_toml_uses_the_same_shape() -> None:
    settings = tomllib.loads(TOML)
    permissions = load_permissions(settings=settings)
    assert permissions.allowed("alice") == ("default", "research")
    assert permissions.fallback == ()


def test_the_fallback_is_nothing_unless_configured() -> None:
    permissions = parse_permissions({"users": {"alice": ["default"]}})
    assert permissions.fallback == ()
    with pytest.raises(AccessDenied) as caught:
        permissions.check("mallory", None)
    assert caught.value.denied == ("default",)
    assert "'mallory' is not listed in the permissions" in str(caught.value)
    assert "fallback groups (none)" in str(caught.value)
    assert permissions.check("mallory", []) == ()


def test_an_empty_section_turns_access_control_on_for_everyone() -> None:
    permissions = parse_permissions({})
    assert not permissions.is_unrestricted
    with pytest.raises(AccessDenied):
        permissions.check("alice", ["default"])


def test_no_section_anywhere_means_access_control_off() -> None:
    permissions = load_permissions({"tool": {}}, {"broker": "memory://"})
    assert permissions.is_unrestricted
    assert permissions.check("anyone", ["*"]) == ("*",)
    assert Permissions.unrestricted().allowed("x") == ("*",)


def test_star_must_be_granted_explicitly() -> None:
    permissions = parse_permissions(SECTION)
    assert permissions.check("ops", ["*"]) == ("*",)
    assert permissions.check("ops", ["anything", "at-all"]) == ("anything", "at-all")
    with pytest.raises(AccessDenied, match="may not request every tool group"):
        permissions.check("alice", ["*"])


def test_requests_are_checked_after_defaulting() -> None:
    permissions = parse_permissions(SECTION)
    assert permissions.check("alice", None) == ("default",)
    assert permissions.check("alice", ["research"]) == ("research",)
    with pytest.raises(AccessDenied) as caught:
        permissions.check("alice", ["research", "admin", "write"])
    assert caught.value.denied == ("admin", "write")
    assert "ask an administrator" in str(caught.value)


def test_group_names_are_case_sensitive() -> None:
    permissions = parse_permissions({"users": {"alice": ["Research"]}})
    with pytest.raises(AccessDenied):
        permissions.check("alice", ["research"])


def test_every_problem_is_reported_naming_the_user_and_field() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_permissions(
            {
                "user": {},
                "users": {"alice": "default", "bob": ["ok", 3], "carol": {"groups": []}, "": []},
                "fallback": "default",
            }
        )
    assert problems(caught) == [
        "permissions field 'user': is not a permissions key; did you mean 'users'?",
        """permissions field 'users.alice': must be a list of group names; write ["default"]""",
        "permissions field 'users.bob': group names must be non-empty strings, not the value 3",
        "permissions field 'users.carol': must be a list of group names (the groups user "
        "'carol' may request), like [\"default\"], not an object",
        "permissions field 'users': user names must be non-empty strings, not the string \"\"",
        """permissions field 'fallback': must be a list of group names; write ["default"]""",
    ]


def test_the_section_itself_must_be_an_object() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_permissions(["alice"], where="toolbus.toml [permissions]")
    [message] = problems(caught)
    assert message.startswith("toolbus.toml [permissions]: must be an object like")


def test_users_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="field 'users': must map each user"):
        parse_permissions({"users": ["alice"]})


def test_permissions_in_two_places_are_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"both in the configuration snapshot and in toolbus\.toml"
    ):
        load_permissions({"permissions": {}}, {"permissions": {}})


def test_errors_name_where_the_section_came_from() -> None:
    with pytest.raises(ConfigError, match=r"toolbus.toml \[permissions\] field 'fallback'"):
        load_permissions(settings={"permissions": {"fallback": 1}})
    with pytest.raises(ConfigError, match="snapshot section 'permissions' field 'fallback'"):
        load_permissions({"permissions": {"fallback": 1}})


def test_permissions_are_immutable() -> None:
    permissions = Permissions({"alice": ("default",)})
    with pytest.raises(TypeError):
        permissions.users["mallory"] = ("*",)  # type: ignore[index]
    with pytest.raises(AttributeError):
        permissions.fallback = ("*",)  # type: ignore[misc]


def test_a_config_directory_holds_them_in_permissions_json(tmp_path: Path) -> None:
    (tmp_path / "tool").mkdir()
    (tmp_path / "permissions.json").write_text(json.dumps(SECTION), encoding="utf-8")
    permissions = load_permissions(read_snapshot(tmp_path))
    assert permissions.allowed("ops") == ("*",)
