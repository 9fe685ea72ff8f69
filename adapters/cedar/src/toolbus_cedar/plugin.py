"""Registers the Cedar call-policy engine (``[policy] engine = "cedar"``)."""

from __future__ import annotations

from toolbus.plugins import PolicyEngineInfo, PolicyEngineRegistrar, hookimpl
from toolbus_cedar.engine import load


@hookimpl
def toolbus_register_policy_engines(register: PolicyEngineRegistrar) -> None:
    register(PolicyEngineInfo(name="cedar", load=load, distribution="toolbus-cedar"))
