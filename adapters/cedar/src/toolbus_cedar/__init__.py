"""Call policies in Cedar: a decision on every call, its arguments included.

Installed with ``pip install 'toolbus[policy]'`` and chosen by ``[policy]`` in
``toolbus.toml`` (docs/access-control.md, "Policies on arguments"). The modules:

* :mod:`~toolbus_cedar.engine`: :class:`CedarEngine`, the policy engine;
* :mod:`~toolbus_cedar.schema`: the Cedar schema made from the configuration;
* :mod:`~toolbus_cedar.reading`: policy files, each policy with its file and line;
* :mod:`~toolbus_cedar.references`: what of a call the policies read;
* :mod:`~toolbus_cedar.fixes`: Cedar's messages, with what to do;
* :mod:`~toolbus_cedar.watching`: following the files;
* :mod:`~toolbus_cedar.plugin`: the entry point.
"""

from __future__ import annotations

from toolbus_cedar.engine import CedarEngine, load
from toolbus_cedar.schema import CallSchema, call_schema

__all__ = ["CallSchema", "CedarEngine", "call_schema", "load"]
