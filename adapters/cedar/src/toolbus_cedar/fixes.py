"""Cedar's validation messages, with what to do about each."""

from __future__ import annotations

import re

from toolbus_cedar.schema import CallSchema

_ATTRIBUTE = re.compile(r"attribute `(?:arguments\.)?([^`]+)`")


def named_attribute(message: str) -> str | None:
    """The attribute a Cedar validation message is about, if it names one."""
    named = _ATTRIBUTE.search(message)
    return named.group(1) if named else None


def unknown_argument(name: str, schema: CallSchema) -> str:
    """Why policies cannot use the argument ``name``, and the fix."""
    why = schema.unusable.get(name)
    if why is not None:
        return f"policies cannot use argument {name!r}: {why}"
    known = ", ".join(schema.arguments) or "none"
    return (
        f"no tool declares an argument {name!r} (the arguments policies can use: "
        f"{known}); correct the name, or declare the argument in the tool's arguments"
    )


def explained(message: str, schema: CallSchema) -> str:
    """``message`` (Cedar's, without its ``for policy `policyN`, `` prefix) and the fix."""
    text = re.sub(r"^for policy `[^`]+`, ", "", message)
    attribute = named_attribute(text) or ""
    if "unable to guarantee safety of access to optional attribute" in text:
        subject = "context.arguments" if "in context" in text else "principal"
        fix = f"test that it is there first: {subject} has {attribute} && ..."
    elif "in context" in text and "not found" in text:
        fix = unknown_argument(attribute, schema)
    elif "on entity type `User`" in text and "not found" in text:
        known = ", ".join(schema.user_attributes) or "none"
        fix = (
            f"no user has an attribute {attribute!r} (users' attributes: {known}); give users "
            "it under [policy.users.<name>] in toolbus.toml"
        )
    elif "unrecognized entity type" in text:
        fix = "the entity types are User, Group, Tool and Service"
    elif "unrecognized action" in text or "unable to find an applicable action" in text:
        fix = 'the one action is Action::"call"'
    elif "unexpected type" in text:
        fix = (
            "compare values of one type; toolbus policy schema prints each attribute's type "
            '(a number argument is a decimal: compare with decimal("10.5"))'
        )
    else:
        fix = "toolbus policy schema prints what policies can refer to"
    return f"{text}; {fix}"
