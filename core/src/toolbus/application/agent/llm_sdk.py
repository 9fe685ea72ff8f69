"""What an LLM adapter on a provider's official SDK shares: one turn, streamed or whole,
and the SDK's errors as :class:`~toolbus.application.agent.llm.LLMError`.

The ``openai`` and ``anthropic`` SDKs are generated alike: a client with a
``base_url`` and ``close()``; an ``APIStatusError`` carrying ``status_code``,
``body`` and ``message``; an ``APIConnectionError``; and one base class for
everything else they raise. An adapter subclasses :class:`SdkChat`, names its
SDK's three error classes (:class:`SdkErrors`) and writes the request, the
streamed turn and the whole turn; the switch between them (the ``stream``
option) and the errors are handled here, once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from toolbus.application.agent.llm import LLMError, TurnEvent, provider_error_message
from toolbus.domain.agent.turns import ModelTurn
from toolbus.domain.config.schemas import ExportFormat


class SdkClient(Protocol):
    """What :class:`SdkChat` uses of an SDK's async client."""

    @property
    def base_url(self) -> Any: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SdkErrors:
    """An SDK's exception classes, most specific first."""

    #: The provider answered with an HTTP error (``status_code``, ``body``, ``message``).
    status: type[Exception]
    #: The provider could not be reached (``message``).
    connection: type[Exception]
    #: Anything else the SDK raises (an unreadable response, say).
    other: type[Exception]


class SdkChat(ABC):
    """A chat model behind a provider's SDK; ``stream=False`` asks for whole turns instead."""

    #: The SDK's exceptions, turned into :class:`LLMError` by :meth:`stream`.
    errors: ClassVar[SdkErrors]

    def __init__(self, model: str, client: SdkClient, *, stream: bool = True) -> None:
        self._model = model
        self.client = client
        self.streams = stream

    @property
    def model(self) -> str:
        return self._model

    @property
    @abstractmethod
    def tool_format(self) -> ExportFormat:
        """The tool-list format the provider takes."""

    async def stream(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AsyncIterator[TurnEvent]:
        """One turn: deltas as they come and then the turn, or the whole turn at once."""
        request = self.request(messages, tools)
        try:
            if self.streams:
                async for event in self.streamed(request):
                    yield event
            else:
                yield await self.whole(request)
        except self.errors.other as exc:
            raise self._llm_error(exc) from None

    def where(self) -> str:
        """The model and its server, as messages name them."""
        return f"the model {self._model!r} at {self.client.base_url}"

    def _llm_error(self, exc: Exception) -> LLMError:
        where = self.where()
        if isinstance(exc, self.errors.status):
            status: int = getattr(exc, "status_code", 0)
            said = provider_error_message(getattr(exc, "body", None), getattr(exc, "message", ""))
            return LLMError(f"{where} answered HTTP {status}: {said}", status=status)
        if isinstance(exc, self.errors.connection):
            return LLMError(f"cannot reach {where}: {getattr(exc, 'message', exc)}")
        return LLMError(f"{where} failed: {type(exc).__name__}: {exc}")

    @abstractmethod
    def request(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The SDK's keyword arguments for one turn (without asking to stream)."""

    @abstractmethod
    def streamed(self, request: dict[str, Any]) -> AsyncIterator[TurnEvent]:
        """The turn streamed: deltas and tool-call starts as they come, the turn last."""

    @abstractmethod
    async def whole(self, request: dict[str, Any]) -> ModelTurn:
        """The turn asked for whole."""

    async def aclose(self) -> None:
        await self.client.close()
