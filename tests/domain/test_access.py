"""Gateway authorization of requested tool groups (docs/access-control.md)."""

from __future__ import annotations

import pytest

from toolbus.domain.access.check import check_access
from toolbus.domain.errors import AccessDenied


@pytest.mark.parametrize(
    ("requested", "allowed", "granted"),
    [
        (None, {"default"}, ("default",)),
        (["read-only"], {"read-only", "write"}, ("read-only",)),
        (["read-only", "write"], ["read-only", "write"], ("read-only", "write")),
        ([], set(), ()),
        ([], {"admin"}, ()),
        (["anything", "at-all"], {"*"}, ("anything", "at-all")),
        (["*"], {"*"}, ("*",)),
        (None, {"*"}, ("default",)),
    ],
)
def test_allowed_requests_return_the_normalized_groups(
    requested: list[str] | None, allowed: set[str] | list[str], granted: tuple[str, ...]
) -> None:
    assert check_access("alice", requested, allowed) == granted


def test_a_request_without_groups_needs_the_default_group() -> None:
    with pytest.raises(AccessDenied) as caught:
        check_access("bob", None, {"read-only"})

    assert caught.value.user == "bob"
    assert caught.value.denied == ("default",)


def test_every_disallowed_group_is_named_once_in_request_order() -> None:
    with pytest.raises(AccessDenied) as caught:
        check_access("bob", ["write", "read-only", "admin", "write"], {"read-only"})

    assert caught.value.denied == ("write", "admin")
    assert "'write', 'admin'" in str(caught.value)
    assert "bob" in str(caught.value)


def test_the_wildcard_needs_the_wildcard() -> None:
    with pytest.raises(AccessDenied) as caught:
        check_access("bob", ["*"], {"read-only", "write", "admin"})

    assert caught.value.denied == ("*",)
    assert "needs '*' among the user's allowed groups" in str(caught.value)


def test_the_wildcard_refusal_also_names_other_refused_groups() -> None:
    with pytest.raises(AccessDenied) as caught:
        check_access("bob", ["*", "admin", "read-only"], {"read-only"})

    assert caught.value.denied == ("*", "admin")
    assert "(nor group(s) 'admin')" in str(caught.value)


def test_group_names_are_case_sensitive() -> None:
    with pytest.raises(AccessDenied):
        check_access("bob", ["Admin"], {"admin"})


def test_a_bare_string_is_refused_as_a_mistake() -> None:
    with pytest.raises(TypeError):
        check_access("bob", "admin", {"admin"})
    with pytest.raises(TypeError):
        check_access("bob", ["admin"], "admin")
