"""Hooks: put a tool's output into the chat history before the agent starts.

Configure hooks the way a DIAL Quick Apps manifest does, and validate them::

    from toolbus.hooks import parse_hooks

    hooks = parse_hooks([
        {
            "kind": "tool_call",
            "event": "on_request_start",
            "toolset_name": "memory_server",
            "tool_name": "get_memories",
            "arguments": {"user_id": "current"},
            "refresh_condition": {"kind": "ttl", "ttl_minutes": 60},
        }
    ])  # raises ConfigError listing every problem of every hook

Inject a result as a synthetic tool call (pure: the input list is untouched)::

    from toolbus.hooks import inject, ttl_is_fresh

    hook = hooks[0]
    args = hook.arguments
    if not ttl_is_fresh(messages, tool_name=hook.call_name, arguments=args, now=now):
        observation = ...  # call the tool
        messages = inject(
            messages,
            tool_name=hook.call_name,
            arguments=args,
            content=observation,
            frequency=hook.frequency,
            ttl_expiry=hook.ttl_expiry(now),
        )

``docs/hooks.md`` describes every field, both frequencies and the id format.
"""

from toolbus.domain.hook_config import (
    HookConfig,
    HookEvent,
    RefreshCondition,
    ToolCallHook,
    TTLRefresh,
    parse_hooks,
)
from toolbus.domain.injection import (
    InjectionFrequency,
    SyntheticPair,
    find_latest_pair,
    identity_prefix,
    inject,
    make_call_id,
    parse_ttl_expiry,
    ttl_is_fresh,
)
from toolbus.domain.naming import sanitize_toolname

__all__ = [
    "HookConfig",
    "HookEvent",
    "InjectionFrequency",
    "RefreshCondition",
    "SyntheticPair",
    "TTLRefresh",
    "ToolCallHook",
    "find_latest_pair",
    "identity_prefix",
    "inject",
    "make_call_id",
    "parse_hooks",
    "parse_ttl_expiry",
    "sanitize_toolname",
    "ttl_is_fresh",
]
