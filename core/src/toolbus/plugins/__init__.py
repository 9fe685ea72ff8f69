"""Plugins: broker adapters and tool plugins, found through entry points, run by pluggy.

Six entry-point groups:

* ``toolbus.adapters``: one entry point per broker, **named after its URL
  scheme** (``memory``, ``nats``, ``pulsar``, ``kafka``; RabbitMQ's adapter
  has one for each of ``amqp``, ``amqps`` and ``rabbitmq``). Only the adapter a
  URL names is imported, so ``pip install toolbus`` never loads a broker client
  it does not use. The module implements :meth:`Spec.toolbus_register_adapters`.
* ``toolbus.plugins``: tool plugins. Each implements
  :meth:`Spec.toolbus_register_tools` to contribute tool services with their
  default descriptors, and may add tool types. The same modules may implement
  the code hooks (``toolbus_on_request_start``, ``toolbus_on_pre_tool_use``,
  ``toolbus_on_post_tool_use``, ``toolbus_on_completion``); see
  :class:`toolbus.hooks.CodeHooks` and docs/hooks.md.
* ``toolbus.llms``: one entry point per LLM adapter, **named after its URL
  scheme** (``openai``, ``anthropic``, ``scripted``), found like broker
  adapters. The module implements :meth:`Spec.toolbus_register_llms`.
* ``toolbus.state_stores``: one entry point per state store, **named after its
  URL scheme** (``memory``, ``nats``, ``redis``), found like broker adapters. The
  module implements :meth:`Spec.toolbus_register_state_stores`.
* ``toolbus.policy_engines``: one entry point per call-policy engine, **named
  after the engine** (``cedar``); ``[policy] engine`` names the one to use. The
  module implements :meth:`Spec.toolbus_register_policy_engines`.
* ``toolbus.commands``: command-line commands. Each implements
  :meth:`Spec.toolbus_register_commands`; see :mod:`toolbus.cli.plugin_api`.

pluggy is used at start-up only; per-call paths never go through it.

The hook specifications and what each hook is handed are
:mod:`toolbus.plugins.hookspecs`; finding and loading plugins is
:mod:`toolbus.plugins.discovery`; what is installed (package metadata, nothing imported)
is :mod:`toolbus.plugins.installed`. All are used through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolbus._internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolbus.plugins.discovery import (
        ToolPlugin,
        adapter_for,
        asyncapi_broker,
        connect,
        connect_llm,
        connect_state,
        connect_state_beside_broker,
        llm_adapter_for,
        load_command_plugins,
        load_hook_plugins,
        load_policy_engine,
        load_tool_plugins,
        state_store_for,
    )
    from toolbus.plugins.hookspecs import (
        CODE_HOOKS,
        PROJECT,
        AdapterInfo,
        AdapterRegistrar,
        Command,
        CommandGroup,
        CommandLine,
        LLMInfo,
        LLMRegistrar,
        PolicyEngineInfo,
        PolicyEngineRegistrar,
        Spec,
        StateStoreInfo,
        StateStoreRegistrar,
        ToolRegistrar,
        hookimpl,
        hookspec,
    )
    from toolbus.plugins.installed import (
        ADAPTER_GROUP,
        COMMAND_GROUP,
        LLM_GROUP,
        PLUGIN_GROUP,
        POLICY_GROUP,
        STATE_GROUP,
        InstalledPlugin,
        installed_plugins,
    )

# Each name from its module on first use: what is installed (``installed``, package
# metadata only) is read without importing pluggy, the hook specifications or any plugin.
_HOMES = {
    "ADAPTER_GROUP": "installed",
    "COMMAND_GROUP": "installed",
    "LLM_GROUP": "installed",
    "PLUGIN_GROUP": "installed",
    "POLICY_GROUP": "installed",
    "STATE_GROUP": "installed",
    "InstalledPlugin": "installed",
    "ToolPlugin": "discovery",
    "adapter_for": "discovery",
    "asyncapi_broker": "discovery",
    "connect": "discovery",
    "connect_llm": "discovery",
    "connect_state": "discovery",
    "connect_state_beside_broker": "discovery",
    "installed_plugins": "installed",
    "llm_adapter_for": "discovery",
    "load_command_plugins": "discovery",
    "load_hook_plugins": "discovery",
    "load_policy_engine": "discovery",
    "load_tool_plugins": "discovery",
    "state_store_for": "discovery",
    "CODE_HOOKS": "hookspecs",
    "PROJECT": "hookspecs",
    "AdapterInfo": "hookspecs",
    "AdapterRegistrar": "hookspecs",
    "Command": "hookspecs",
    "CommandGroup": "hookspecs",
    "CommandLine": "hookspecs",
    "LLMInfo": "hookspecs",
    "LLMRegistrar": "hookspecs",
    "PolicyEngineInfo": "hookspecs",
    "PolicyEngineRegistrar": "hookspecs",
    "Spec": "hookspecs",
    "StateStoreInfo": "hookspecs",
    "StateStoreRegistrar": "hookspecs",
    "ToolRegistrar": "hookspecs",
    "hookimpl": "hookspecs",
    "hookspec": "hookspecs",
}

__getattr__ = lazy_exports(__name__, _HOMES)


__all__ = [
    "ADAPTER_GROUP",
    "CODE_HOOKS",
    "COMMAND_GROUP",
    "LLM_GROUP",
    "PLUGIN_GROUP",
    "POLICY_GROUP",
    "PROJECT",
    "STATE_GROUP",
    "AdapterInfo",
    "AdapterRegistrar",
    "Command",
    "CommandGroup",
    "CommandLine",
    "InstalledPlugin",
    "LLMInfo",
    "LLMRegistrar",
    "PolicyEngineInfo",
    "PolicyEngineRegistrar",
    "Spec",
    "StateStoreInfo",
    "StateStoreRegistrar",
    "ToolPlugin",
    "ToolRegistrar",
    "adapter_for",
    "asyncapi_broker",
    "connect",
    "connect_llm",
    "connect_state",
    "connect_state_beside_broker",
    "hookimpl",
    "hookspec",
    "installed_plugins",
    "llm_adapter_for",
    "load_command_plugins",
    "load_hook_plugins",
    "load_policy_engine",
    "load_tool_plugins",
    "state_store_for",
]
