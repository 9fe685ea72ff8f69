"""What an agent run answers the tools that ask it: its model, its user, its roots.

A tool the agent loop calls may ask its caller for input
(:mod:`toolbus.application.calls.asking`). The run is that caller, and
answers with what it has (:class:`RunRelay`):

* a completion (sampling): from its own model, the request's messages as the
  chat (the tokens count in the run's usage);
* a person's answer (elicitation): from its user, when the run has a way to
  ask them (:data:`AskUser`): the run reports an ``input`` event with the
  requests, and waits for the answers; without one, the tool learns the
  caller cannot give them (and may do without, or answer the model with an error);
* the workspace roots: the ones the loop was given, if any.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from toolbus.application.agent.llm import LLM, complete
from toolbus.domain.agent.turns import Usage
from toolbus.domain.calls.input_requests import (
    Elicitation,
    ElicitationAnswer,
    InputAnswer,
    InputAsk,
    InputKind,
    Root,
    RootsAnswer,
    Sampling,
    SamplingAnswer,
)

#: Asks the run's user: the forms by key; their answers by key (``None``: no answer came,
#: the forms count as dismissed).
AskUser = Callable[[InputAsk], Awaitable[Mapping[str, InputAnswer] | None]]


class RunRelay:
    """Answers what the tools of one run ask; see the module docs.

    Args:
        llm: the run's model, for completions.
        ask_user: how the run asks its user (after reporting the ``input`` event), or
            ``None``: it cannot.
        roots: the workspace roots the run may tell tools.
        spent: told of the tokens each completion used (and awaited: the run prices it).
    """

    def __init__(
        self,
        llm: LLM,
        *,
        ask_user: AskUser | None = None,
        roots: Sequence[Root] = (),
        spent: Callable[[Usage], Awaitable[None]] | None = None,
    ) -> None:
        self.llm = llm
        self.ask_user = ask_user
        self.roots = tuple(roots)
        self.spent = spent
        kinds: set[InputKind] = {"sampling"}
        if ask_user is not None:
            kinds.add("elicitation")
        if roots:
            kinds.add("roots")
        self.kinds = frozenset(kinds)

    async def answer(self, asked: InputAsk) -> Mapping[str, InputAnswer]:
        answers: dict[str, InputAnswer] = {}
        forms = {k: r for k, r in asked.requests.items() if isinstance(r, Elicitation)}
        for key, request in asked.requests.items():
            if isinstance(request, Sampling):
                answers[key] = await self._complete(request)
            elif not isinstance(request, Elicitation):
                answers[key] = RootsAnswer(self.roots)
        if forms and self.ask_user is not None:
            given = await self.ask_user(InputAsk(forms, asked.state)) or {}
            for key in forms:
                answer = given.get(key)
                answers[key] = answer if answer is not None else ElicitationAnswer("cancel")
        return answers

    async def _complete(self, request: Sampling) -> SamplingAnswer:
        messages: list[dict[str, Any]] = []
        system = request.params().get("systemPrompt")
        if system:
            messages.append({"role": "system", "content": system})
        messages += [{"role": role, "content": text} for role, text in request.texts()]
        turn = await complete(self.llm, messages)
        if self.spent is not None:
            await self.spent(turn.usage)
        stop = "maxTokens" if turn.stop_reason in ("length", "max_tokens") else "endTurn"
        return SamplingAnswer(turn.text, self.llm.model, stop)
