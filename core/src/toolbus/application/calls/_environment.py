"""Tool arguments a request asks to be set from the service's environment (``env-args``).

A descriptor's ``options.envs`` makes the caller send, as the ``env-args``
property, which argument takes which environment variable; the service reads
only the variables it declares (``env_params``), so that whoever can publish a
request cannot have any variable of the service's environment put into a tool's
arguments. Values read are secrets from then on (docs/tool-call-context.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.calls._replies import secret_forms
from toolbus.application.calls.service import ToolService
from toolbus.domain.errors import BadRequest


def inject_environment(
    arguments: dict[str, Any],
    env_names: str,
    *,
    service: ToolService,
    environ: Mapping[str, str],
    secrets: list[str],
    warnings: ThrottledLog,
) -> dict[str, Any]:
    """``arguments`` with those the ``env-args`` property names set from ``environ``.

    Only variables the service offers (``env_params``) are read; each value read
    is added to ``secrets``, as injected and as it reads inside JSON text.
    """
    try:
        names = json.loads(env_names)
        if not isinstance(names, dict):
            raise ValueError
    except ValueError:
        raise BadRequest(
            "message property 'env-args' must be a JSON object of argument -> variable name"
        ) from None
    arguments = dict(arguments)
    offered = service.env_params
    for argument, variable in names.items():
        if variable not in offered:
            warnings.warning(
                "undeclared-env",
                "%r: a request asked for environment variable %s for argument %r, which "
                "the service does not offer (env_params); argument skipped",
                service.id,
                variable,
                argument,
            )
            continue
        value = environ.get(str(variable))
        if value is None:
            warnings.warning(
                f"unset-env {variable}",
                "%r: environment variable %s for argument %r is not set; argument skipped",
                service.id,
                variable,
                argument,
            )
            continue
        arguments[argument] = value
        # Also as json.dumps writes it, inside a structured result.
        secrets.extend(secret_forms(value))
    return arguments
