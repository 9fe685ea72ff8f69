"""Reading LLM URLs: ``SCHEME://MODEL`` or ``SCHEME+http(s)://HOST:PORT/PATH/MODEL``.

Shared by the LLM adapters so that every provider reads its URL, options and
API key the same way. Keys come from environment variables only, never from
the URL, so that a URL can be logged and shown: a URL with user-info
(``user@`` or ``user:key@``, which an HTTP client would send as Basic
authentication and print in its errors) is refused, and never echoed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from toolbus._internal.urls import redact_url
from toolbus.domain.errors import PluginError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True, slots=True)
class LLMLocation:
    """Where a model is: its name, the API base URL (``None``: the provider's), options."""

    model: str
    base_url: str | None
    options: dict[str, str]

    def integer(self, name: str, default: int) -> int:
        value = self.options.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            number = -1
        if number < 0:
            raise PluginError(f"LLM option {name}={value!r} must be a whole number, 0 or more")
        return number

    def number(self, name: str, default: float) -> float:
        value = self.options.get(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0:
            raise PluginError(f"LLM option {name}={value!r} must be a positive number")
        return number

    def flag(self, name: str, default: bool) -> bool:
        value = self.options.get(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise PluginError(f"LLM option {name}={value!r} must be true or false")


def parse_llm_url(
    url: str, options: Mapping[str, Any], *, model_in_path: bool = True
) -> LLMLocation:
    """Split ``url`` into model, base URL and options (query parameters, then ``options``).

    ``openai://gpt-4.1-mini`` names the provider's own endpoint;
    ``openai+http://127.0.0.1:11434/v1/llama3`` the base URL
    ``http://127.0.0.1:11434/v1`` and the model ``llama3`` (the last path
    segment; ``?model=`` names models with a ``/`` in them).
    """
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise PluginError(
            f"LLM URL {redact_url(url)!r} carries user-info before '@'; API keys are read "
            "from environment variables only, never from the URL: remove it, and set the "
            "provider's variable or name another with api_key_env=NAME"
        )
    scheme, _, transport = parts.scheme.partition("+")
    merged: dict[str, str] = dict(parse_qsl(parts.query))
    merged.update({key: str(value) for key, value in options.items()})
    if "api_key" in merged:
        raise PluginError(
            "API keys are read from environment variables only, never from the LLM URL or "
            "options; set the provider's variable, or name another with api_key_env=NAME"
        )
    if not transport:
        model = merged.pop("model", "") or (parts.netloc + parts.path).strip("/")
        if not model:
            raise PluginError(f"LLM URL {redact_url(url)!r} names no model; use {scheme}://MODEL")
        return LLMLocation(model, None, merged)
    if transport not in ("http", "https"):
        raise PluginError(
            f"LLM URL {redact_url(url)!r}: {scheme}+{transport}:// is not supported; use "
            f"{scheme}+http:// or {scheme}+https://"
        )
    path = parts.path.rstrip("/")
    model = merged.pop("model", "")
    if not model:
        path, _, model = path.rpartition("/")
        if not model:
            raise PluginError(
                f"LLM URL {redact_url(url)!r} names no model; put it last in the path, as in "
                f"{scheme}+{transport}://HOST:PORT/v1/MODEL"
            )
    return LLMLocation(model, f"{transport}://{parts.netloc}{path}", merged)


def api_key(location: LLMLocation, default_variable: str, *, required: bool) -> str | None:
    """The key in ``api_key_env`` (default ``default_variable``); an error if required and unset."""
    variable = location.options.get("api_key_env", default_variable)
    key = os.environ.get(variable)
    if not key and required:
        raise PluginError(
            f"no API key: set the environment variable {variable} (or name another with "
            "api_key_env=NAME in the LLM URL)"
        )
    return key or None
