"""Defining tool services: a decorated function or a :class:`ToolService` subclass.

A service answers requests ``(user, config, arguments)`` with an observation.
Returning a value answers once; an async generator streams chunks. Raising a
:class:`~toolbus.domain.errors.ToolCallError` sets the wire error type; any other
exception becomes TrustGraph's generic ``tool-service-error``.

A decorated function whose parameters are exactly ``user, config, arguments``
(TrustGraph 2.1 to 2.3) or ``config, arguments`` (TrustGraph 2.4 and later)
gets the raw dicts, as in TrustGraph; so does a subclass's ``invoke`` of either
shape. Any other signature is *typed*: the
parameters (except ``user``, ``config`` and ``caller``, passed when named) are the
tool's arguments, validated by pydantic, and their JSON Schema is the tool's
argument schema — the way the MCP SDK does it. Sync functions run in a worker
thread so that they never block the event loop.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired, get_type_hints

import anyio.to_thread
import pydantic
from typing_extensions import TypedDict

from toolbus.application.identity.caller import current_caller
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.config.descriptors import AFTER_EXECUTION_VALUES
from toolbus.domain.errors import BadRequest


@dataclass(frozen=True, slots=True)
class ToolResult:
    """An answer with control data: ``after_execution`` overrides the tool's setting.

    ``"terminate"`` makes this observation the agent's final answer; ``"suspend"``
    lets the agent loop go on. Return it instead of a plain value when the
    service, not the configuration, knows which applies. ``cost`` is what the
    call cost (an upstream API's charge, say), in the deployment's currency: it
    travels as the response's ``cost`` property, and counts where the operator
    prices the tool ``"reported"`` (docs/limits.md).
    """

    content: Any
    after_execution: str | None = None
    cost: float | None = None

    def __post_init__(self) -> None:
        if self.after_execution not in (None, *AFTER_EXECUTION_VALUES):
            raise ValueError(
                f"after_execution must be one of {AFTER_EXECUTION_VALUES}, "
                f"not {self.after_execution!r}"
            )
        cost = self.cost
        if cost is not None and (
            isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < math.inf
        ):
            raise ValueError(f"cost must be a finite number, 0 or more, not {cost!r}")


#: A config value a tool may set (``"join-stream": true``) to have a streaming
#: service answer its calls with one joined response; the service must list it
#: in ``config_params`` for it to be forwarded.
JOIN_STREAM_PARAM = "join-stream"

_RAW_SIGNATURE = ("user", "config", "arguments")
#: TrustGraph 2.4 and later: ``invoke(config, arguments)``, no user.
_RAW_SIGNATURE_2_4 = ("config", "arguments")
#: Parameters filled by the host, not from arguments: ``caller`` is the
#: :class:`~toolbus.domain.identity.Caller` (verified where the service checks tokens).
_INJECTED = frozenset({"user", "config", "caller"})


def default_queues(service_id: str) -> tuple[str, str]:
    """TrustGraph's default topics for a service: ``non-persistent://tg/{request|response}/{id}``."""
    return (
        f"non-persistent://tg/request/{service_id}",
        f"non-persistent://tg/response/{service_id}",
    )


class ToolService:
    """Base class for a tool service. Subclass it and implement :meth:`invoke`.

    Class attributes describe the service (its tool-service descriptor):
    ``id``, ``request_queue``, ``response_queue`` (default: TrustGraph's
    ``non-persistent://tg/{request|response}/{id}``) and ``config_params``.
    """

    id: str = ""
    request_queue: str = ""
    response_queue: str = ""
    config_params: Sequence[str | Mapping[str, Any]] = ()
    #: Environment variables of this process that tools may have injected as
    #: arguments (``options.envs``); a request naming any other gets none.
    env_params: Collection[str] = ()
    #: JSON Schema of the arguments, when the service knows it (typed functions do).
    arguments_schema: dict[str, Any] | None = None
    #: Answer a streamed result with one response holding every chunk, for callers
    #: that keep only the first response (TrustGraph's ``ToolServiceClient.call``).
    #: Per tool instead: list :data:`JOIN_STREAM_PARAM` in ``config_params``.
    join_stream: bool = False
    # False for an invoke(config, arguments) ported from TrustGraph 2.4+ (set in __init__).
    _invoke_takes_user = True

    def __init__(self) -> None:
        if not self.id:
            raise TypeError(f"{type(self).__name__} must set a non-empty 'id'")
        default_request, default_response = default_queues(self.id)
        self.request_queue = self.request_queue or default_request
        self.response_queue = self.response_queue or default_response
        # Fail at definition time, not on the first request.
        parse_queue(self.request_queue)
        parse_queue(self.response_queue)
        # A service ported from TrustGraph 2.4 or later keeps its invoke(config, arguments).
        parameters = tuple(inspect.signature(self.invoke).parameters)
        self._invoke_takes_user = parameters != _RAW_SIGNATURE_2_4

    def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        """Answer one request. Implement it as ``async def``: return the observation,
        or ``yield`` chunks to stream."""
        raise NotImplementedError

    async def handle(
        self, user: str, config: dict[str, Any], arguments: dict[str, Any]
    ) -> Any | AsyncIterator[Any]:
        """What the host calls: the result, or an async iterator of chunks."""
        if self._invoke_takes_user:
            result = self.invoke(user, config, arguments)
        else:
            result = self.invoke(config, arguments)  # type: ignore[call-arg]
        if inspect.isawaitable(result):
            return await result
        return result

    def descriptor(self) -> dict[str, Any]:
        """This service's tool-service descriptor, as configuration holds it."""
        return {
            "id": self.id,
            "request-queue": self.request_queue,
            "response-queue": self.response_queue,
            "config-params": [p if isinstance(p, str) else dict(p) for p in self.config_params],
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r} on {self.request_queue}>"


class FunctionToolService(ToolService):
    """A tool service made from one function by :func:`tool_service`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        id: str,
        request_queue: str = "",
        response_queue: str = "",
        config_params: Sequence[str | Mapping[str, Any]] = (),
        env_params: Collection[str] = (),
        join_stream: bool = False,
    ) -> None:
        self.id = id
        self.join_stream = join_stream
        self.env_params = frozenset(env_params)
        self.request_queue = request_queue
        self.response_queue = response_queue
        self.config_params = tuple(config_params)
        super().__init__()
        self.fn = fn
        self.__doc__ = fn.__doc__
        self._is_async = inspect.iscoroutinefunction(fn)
        self._is_async_gen = inspect.isasyncgenfunction(fn)
        names = tuple(inspect.signature(fn).parameters)
        self._raw = names in (_RAW_SIGNATURE, _RAW_SIGNATURE_2_4)
        self._with_user = names != _RAW_SIGNATURE_2_4
        self._injected: tuple[str, ...] = ()
        self._validate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        if not self._raw:
            model, self._injected = _arguments_model(fn)
            self.arguments_schema = model.model_json_schema()
            self._validate = _dict_validator(model)

    def _bind(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
        if self._raw:
            if self._with_user:
                return {"user": user, "config": config, "arguments": arguments}
            return {"config": config, "arguments": arguments}
        assert self._validate is not None
        try:
            kwargs = self._validate(arguments)
        except pydantic.ValidationError as exc:
            raise BadRequest(_describe_validation(self.id, exc)) from None
        if "user" in self._injected:
            kwargs["user"] = user
        if "config" in self._injected:
            kwargs["config"] = config
        if "caller" in self._injected:
            kwargs["caller"] = current_caller()
        return kwargs

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        """Call the function with the request's arguments (validated when typed).

        Returns its result, or, for an async generator function, the iterator of
        its chunks.
        """
        kwargs = self._bind(user, config, arguments)
        if self._is_async_gen:
            return self.fn(**kwargs)
        if self._is_async:
            return await self.fn(**kwargs)
        return await anyio.to_thread.run_sync(lambda: self.fn(**kwargs))

    # invoke is already what the host needs, a coroutine: it is called directly,
    # without ToolService.handle's check for a plain method.
    handle = invoke


def tool_service(
    id: str,
    *,
    request_queue: str = "",
    response_queue: str = "",
    config_params: Sequence[str | Mapping[str, Any]] = (),
    env_params: Collection[str] = (),
    join_stream: bool = False,
) -> Callable[[Callable[..., Any]], FunctionToolService]:
    """Make a tool service from a function.

    ``join_stream=True`` answers a generator's chunks as one response (see
    :attr:`ToolService.join_stream`).

    >>> @tool_service("echo")
    ... async def echo(text: str) -> str:
    ...     return text
    """

    def decorate(fn: Callable[..., Any]) -> FunctionToolService:
        return FunctionToolService(
            fn,
            id=id,
            request_queue=request_queue,
            response_queue=response_queue,
            config_params=config_params,
            env_params=env_params,
            join_stream=join_stream,
        )

    return decorate


def _arguments_model(fn: Callable[..., Any]) -> tuple[type[pydantic.BaseModel], tuple[str, ...]]:
    """A pydantic model of ``fn``'s argument parameters, and which context names it takes."""
    signature = inspect.signature(fn)
    hints = get_type_hints(fn, include_extras=True)  # keep Annotated constraints
    fields: dict[str, Any] = {}
    injected = []
    for name, param in signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool function {fn.__name__} may not take *args or **kwargs")
        if name in _INJECTED:
            injected.append(name)
            continue
        annotation = hints.get(name, Any)
        default = ... if param.default is param.empty else param.default
        fields[name] = (annotation, default)
    model = pydantic.create_model(
        f"{fn.__name__}_arguments",
        __config__=pydantic.ConfigDict(extra="ignore"),
        **fields,
    )
    return model, tuple(injected)


def _dict_validator(
    model: type[pydantic.BaseModel],
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Validates like ``model``, straight into a dict of keyword arguments.

    The same fields (types, constraints, defaults) as a TypedDict: pydantic then
    builds no model instance to copy the values out of, which makes validation
    several times cheaper on the per-call path.
    """
    fields: dict[str, Any] = {
        name: Annotated[info.annotation, info]
        if info.is_required()
        else NotRequired[Annotated[info.annotation, info]]
        for name, info in model.model_fields.items()
    }
    # typing_extensions' TypedDict: pydantic needs it on Python < 3.12. Typed as
    # Any because a class made at run time is beyond a static checker.
    make_typed_dict: Any = TypedDict
    arguments = make_typed_dict(model.__name__, fields)
    arguments.__pydantic_config__ = pydantic.ConfigDict(extra="ignore")
    validate: Callable[[dict[str, Any]], dict[str, Any]]
    validate = pydantic.TypeAdapter(arguments).validator.validate_python
    return validate


def _describe_validation(service_id: str, exc: pydantic.ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return f"invalid arguments for {service_id!r}: " + "; ".join(problems)
