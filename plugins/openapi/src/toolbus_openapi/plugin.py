"""Registers the toolsets ``toolbus.toml`` declares, as any tool plugin registers its services.

With ``[openapi.toolsets.NAME]`` tables in the current directory's
``toolbus.toml``, every ``toolbus`` command that loads tool plugins knows
those toolsets: ``toolbus serve NAME``, ``toolbus call NAME_operationId``,
``toolbus tools``. Without such tables this plugin registers nothing.
"""

from __future__ import annotations

from toolbus.plugins import ToolRegistrar, hookimpl


@hookimpl
def toolbus_register_tools(register: ToolRegistrar) -> None:
    # Imported here: processes that only look for code hooks import this module
    # too, and need neither httpx nor a YAML parser for that.
    from pathlib import Path

    from toolbus.settings import SETTINGS_FILE, load_settings

    settings = load_settings()
    if "openapi" not in settings.file:  # toolset.SETTINGS_TABLE
        return  # no toolsets: httpx and the document parsers stay unloaded
    from toolbus_openapi.toolset import open_toolset, toolsets_from_file

    for toolset in toolsets_from_file(settings.file, Path.cwd(), where=SETTINGS_FILE).values():
        # Commands that only list tools need no credentials; a call without them
        # fails with a message naming the variable.
        service = open_toolset(toolset, require_credentials=False)
        register.service(service, tools=service.tools())
