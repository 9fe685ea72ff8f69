"""A scripted model: replays written turns, for demos, tests and benchmarks.

It needs no network and no API key. ``scripted://demo`` is the script
``toolbus demo`` uses; ``scripted:///path/to/script.json`` reads a script from a
file. The same :class:`Script` drives the test suite's scripted model server,
which speaks the OpenAI and Anthropic HTTP APIs.
"""

from toolbus.scripted.llm import ScriptedLLM
from toolbus.scripted.script import Script, ScriptedCall, ScriptedFailure, ScriptedTurn

__all__ = ["Script", "ScriptedCall", "ScriptedFailure", "ScriptedLLM", "ScriptedTurn"]
