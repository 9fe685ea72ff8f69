"""Reading a broker's options: the URL's query parameters and the ``options`` mapping.

An adapter describes its options as a :class:`BrokerOptions` model (frozen,
``extra="forbid"``, so a misspelt option fails instead of being ignored), typed
with the annotated types here (:data:`Flag`, :data:`Seconds`,
:data:`PositiveInt`, :func:`one_of`, :func:`server_list` ...), so that every
broker reads a flag, a duration or a server list the same way and says the same
thing when one is wrong. A networked broker's options also say how its URL is
written (:attr:`BrokerOptions.schemes`, :attr:`~BrokerOptions.default_port`,
...), and :func:`parse_broker_url` reads the URL, its servers and its user
info the same way for every broker: an adapter's ``parse_options`` is one call.
:func:`parse_broker_options` merges what was read from the URL itself, the
query string and the mapping (in that order: the mapping wins, so a secret can
stay out of the URL), validates them and checks how they fit together
(:meth:`BrokerOptions.conflicts`), reporting every problem at once as a
:class:`~toolbus.domain.errors.BrokerOptionError`.

Values never appear in the messages, since an option may hold a secret; the
URL is named in every message about it as
:func:`~toolbus._internal.urls.redact_url` shows it (no user info, no option
values). A message names its option once, as its problem's field, and says
what is wrong: ``broker URL 'nats://h:4222' field 'ack_wait': must be a number
of seconds``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Annotated, Any, ClassVar, TypeVar
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import pydantic
from pydantic_core import PydanticCustomError

from toolbus._internal.urls import redact_url
from toolbus.domain.errors import BrokerOptionError, Problem

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})
#: The pydantic error type of the messages written here (full sentences, not pydantic's).
_OPTION_ERROR = "broker_option"


class BrokerOptions(pydantic.BaseModel):
    """A broker's options: subclass it, one field per option, typed with the types below."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    #: The broker's name in messages ("NATS option 'ack_wait' must be ..."); empty
    #: for the in-memory bus, whose messages then speak of options in general.
    broker: ClassVar[str] = ""

    # How a networked broker's URL is written, for parse_broker_url.
    #: The URL schemes the broker takes.
    schemes: ClassVar[tuple[str, ...]] = ()
    #: Those of :attr:`schemes` that turn TLS on (``nats+tls``): they set ``tls``.
    tls_schemes: ClassVar[tuple[str, ...]] = ()
    #: The port of a server written without one.
    default_port: ClassVar[int] = 0
    #: The same under a TLS scheme, where it differs (``amqps``: 5671); 0 where not.
    tls_default_port: ClassVar[int] = 0
    #: How to write the URL, for messages: ``kafka://host:port[,host:port]``.
    url_form: ClassVar[str] = ""
    #: The option the URL's servers go to; None where the client reads the URL itself
    #: (they are checked all the same).
    servers_option: ClassVar[str | None] = None

    @classmethod
    def from_userinfo(cls, user: str, password: str | None) -> dict[str, Any] | str:
        """The options a URL's ``user[:password]@`` stands for (``password`` None without a
        colon), or a sentence saying why the URL may not carry them."""
        return "carries credentials; pass them as options instead"

    @classmethod
    def from_path(cls, path: str) -> dict[str, Any] | str:
        """The options a URL's path stands for (AMQP's virtual host), or a sentence saying
        why the URL may not have it. By default a path means nothing and is left alone."""
        return {}

    def conflicts(self) -> Iterator[tuple[str, str]]:
        """``(option, what is wrong)`` for options each valid alone that do not fit together.

        The option is ``""`` when the problem is the combination as a whole; the
        message says what is wrong with the option, as in "must be below 'y'".
        """
        return iter(())


Options = TypeVar("Options", bound=BrokerOptions)


def parse_broker_options(
    model: type[Options],
    query: str,
    options: Mapping[str, Any] | None,
    *,
    where: str,
    url_values: Mapping[str, Any] | None = None,
    problems: Iterable[Problem] = (),
) -> Options:
    """``model`` from ``url_values``, ``query`` (a URL's query string) and ``options`` on top.

    ``url_values`` are what the adapter read from the rest of the URL (its hosts,
    its user info); ``problems`` what it found wrong there, reported together with
    the options' own. ``where`` names what is being read in messages, e.g.
    ``broker_url_where(parts)``.
    """
    values: dict[str, Any] = dict(url_values or {})
    values.update(parse_qsl(query, keep_blank_values=True))
    values.update(options or {})
    found = list(problems)
    try:
        parsed = model.model_validate(values)
    except pydantic.ValidationError as exc:
        found += [
            _problem(model, error, where)
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise BrokerOptionError(found) from None
    found += [Problem(where, name, message) for name, message in parsed.conflicts()]
    if found:
        raise BrokerOptionError(found)
    return parsed


def parse_broker_url(model: type[Options], url: str, options: Mapping[str, Any] | None) -> Options:
    """``model`` from a networked broker's ``url`` and ``options`` (the mapping wins).

    Reads what every broker URL holds the same way: the scheme (one of
    ``model.schemes``; a TLS one sets ``tls``), the comma-separated servers
    (``host[:port]``, to ``model.servers_option``), the user info (as
    :meth:`BrokerOptions.from_userinfo` says), the path (as
    :meth:`BrokerOptions.from_path` says) and the query string; then
    :func:`parse_broker_options`. Every problem comes in one error; the URL is
    named as :func:`~toolbus._internal.urls.redact_url` shows it.
    """
    broker = model.broker
    parts = split_url(url, broker, model.default_port)
    where = broker_url_where(parts)
    problems: list[Problem] = []
    if parts.scheme not in model.schemes:
        problems.append(Problem(where, "", f"is not a {broker} URL; use {model.url_form}"))
    userinfo, at, hosts = parts.netloc.rpartition("@")
    values: dict[str, Any] = {}
    servers_option = model.servers_option
    default_port = model.default_port
    if parts.scheme in model.tls_schemes and model.tls_default_port:
        default_port = model.tls_default_port
    if hosts:
        servers, bad = host_ports(hosts.split(","), default_port)
        problems += [
            Problem(
                where,
                "",
                f"{broker} server {server!r} is not host[:port]; list servers as "
                "host:port,host:port",
            )
            for server in bad
        ]
        # Only the servers that are right go on: one mistake is one problem.
        if servers_option is not None and servers:
            values[servers_option] = servers
    elif servers_option is None or servers_option not in (options or {}):
        given_apart = f" (or the {servers_option} option)" if servers_option else ""
        problems.append(Problem(where, "", f"names no server; use {model.url_form}{given_apart}"))
    if at:
        user, colon, password = userinfo.partition(":")
        read = model.from_userinfo(unquote(user), unquote(password) if colon else None)
        if isinstance(read, str):
            problems.append(Problem(where, "", read))
        else:
            values.update(read)
    from_path = model.from_path(parts.path)
    if isinstance(from_path, str):
        problems.append(Problem(where, "", from_path))
    else:
        values.update(from_path)
    if parts.scheme in model.tls_schemes:
        values["tls"] = True
    return parse_broker_options(
        model, parts.query, options, where=where, url_values=values, problems=problems
    )


def _problem(model: type[BrokerOptions], error: Any, where: str) -> Problem:
    name = ".".join(str(part) for part in error["loc"])
    message: str = error["msg"]
    if error["type"] == "extra_forbidden":
        return Problem(where, name, _unknown(model, name))
    if error["type"] == _OPTION_ERROR:
        return Problem(where, name, message)
    # pydantic's own messages ("Input should be ...") read as the rest of a sentence.
    return Problem(where, name, message[:1].lower() + message[1:])


def _unknown(model: type[BrokerOptions], name: str) -> str:
    known = sorted(model.model_fields)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    what = f"is not a {model.broker} option" if model.broker else "is not an option here"
    return f"{what}{hint} (known: {', '.join(known)})"


def bad_option(message: str) -> PydanticCustomError:
    """The error an option's validator raises: what is wrong, as in "must be a whole number".

    The problem names the option; never put the value in the message: an option
    may hold a secret.
    """
    return PydanticCustomError(_OPTION_ERROR, "{message}", {"message": message})


# -- the types options are written in ------------------------------------------


def option_flag(text: str) -> bool:
    """A broker option's boolean given as text (in a URL): 1/true/yes/on or 0/false/no/off.

    Every adapter reads flags with this (through :data:`Flag`), so they all accept
    the same words.
    """
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"{text!r} is not a boolean; use true or false")


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return option_flag(value)
        except ValueError:
            raise bad_option("is not a boolean; use true or false") from None
    raise bad_option(f"must be bool, not {type(value).__name__}")


def _whole_number(value: object) -> int:
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise bad_option("must be a whole number") from None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise bad_option(f"must be int, not {type(value).__name__}")


def _seconds(value: object) -> float:
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise bad_option("must be a number of seconds") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        raise bad_option(f"must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(number):
        raise bad_option("must be a number of seconds")
    return number


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise bad_option(f"must be a non-empty string, not {type(value).__name__}")
    if not value:
        raise bad_option("must be a non-empty string")
    return value


def _check(test: Callable[[Any], bool], message: str) -> pydantic.AfterValidator:
    def check(value: Any) -> Any:
        if not test(value):
            raise bad_option(message)
        return value

    return pydantic.AfterValidator(check)


def at_least(minimum: int) -> pydantic.AfterValidator:
    """Metadata for a whole number: ``Annotated[WholeNumber, at_least(0)]``."""
    message = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
    return _check(lambda number: number >= minimum, message)


def at_most(maximum: int, why: str = "") -> pydantic.AfterValidator:
    """Metadata for a whole number; ``why`` says where the limit comes from."""
    return _check(lambda number: number <= maximum, f"may be at most {maximum}{why}")


#: true or false: a bool, or 1/true/yes/on, 0/false/no/off as text.
Flag = Annotated[bool, pydantic.PlainValidator(_flag)]
#: An int, or one written as text; a float or a bool is refused, not rounded.
WholeNumber = Annotated[int, pydantic.PlainValidator(_whole_number)]
PositiveInt = Annotated[WholeNumber, at_least(1)]
#: A duration in seconds, 0 or more (an int, a float or text).
Seconds = Annotated[
    float,
    pydantic.PlainValidator(_seconds),
    _check(lambda seconds: seconds >= 0, "must be a number of seconds, 0 or more"),
]
#: A duration in seconds, greater than 0.
PositiveSeconds = Annotated[
    float,
    pydantic.PlainValidator(_seconds),
    _check(lambda seconds: seconds > 0, "must be a positive number of seconds (greater than 0)"),
]
#: Text that is not empty (a path, a name).
Text = Annotated[str, pydantic.PlainValidator(_text)]
#: A credential: :data:`Text`, or None when not given; left out of ``repr``.
SecretText = Annotated[Text | None, pydantic.Field(repr=False)]


def one_of(*choices: str, listed: str | None = None) -> pydantic.PlainValidator:
    """Metadata for an option with fixed settings: ``Annotated[str, one_of("file", "memory")]``.

    Matched whatever the case, and given back as written in ``choices``; a whole
    number in configuration (``acks = 1``) is read as its text. ``listed`` is how
    the settings are named in the message ("one of a, b, c" otherwise).
    """
    canonical = {choice.lower(): choice for choice in choices}
    shown = listed or f"one of {', '.join(choices)}"

    def choose(value: object) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise bad_option(f"must be {shown}, not {type(value).__name__}")
        choice = canonical.get(value.strip().lower())
        if choice is None:
            raise bad_option(f"must be {shown}")
        return choice

    return pydantic.PlainValidator(choose)


# -- servers and URLs ------------------------------------------------------------


def host_port(server: str, default_port: int) -> str:
    """``host:port`` for one server of a broker URL: ``host``, ``host:port``, ``[v6]``,
    ``[v6]:port`` (IPv6 literals keep their brackets). Raises ValueError otherwise."""
    server = server.strip()
    if server.startswith("["):  # an IPv6 literal; its own colons are not the port's
        host, bracket, port = server[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise ValueError(f"{server!r} is not host[:port]")
        host, port = f"[{host}]" if host else "", port[1:]
    else:
        host, _, port = server.partition(":")
    port = port or str(default_port)
    if not host or not port.isdigit() or ":" in port:
        raise ValueError(f"{server!r} is not host[:port]")
    return f"{host}:{port}"


def host_ports(
    servers: Iterable[str], default_port: int, *, schemes: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], list[str]]:
    """``host:port`` for each of ``servers`` that is one, and (stripped) those that are not.

    A server may be written ``scheme://host:port`` for one of ``schemes``.
    """
    good: list[str] = []
    bad: list[str] = []
    for server in servers:
        scheme, separator, rest = server.strip().partition("://")
        written = rest if separator and scheme in schemes else server
        try:
            good.append(host_port(written, default_port))
        except ValueError:
            bad.append(server.strip())
    return tuple(good), bad


def server_list(default_port: int, *, schemes: tuple[str, ...] = ()) -> pydantic.PlainValidator:
    """Metadata for a list of servers: ``Annotated[tuple[str, ...], server_list(4222)]``.

    Takes a comma-separated string or a list of strings; gives ``host:port``s.
    """
    example = f'["host-1:{default_port}", "host-2:{default_port}"]'

    def read(value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            listed = value.split(",")
        elif isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
            listed = list(value)
        else:
            raise bad_option(f"must be a list of host:port strings, for example {example}")
        servers, bad = host_ports(listed, default_port, schemes=schemes)
        if bad:
            # By position: the list may come from configuration, where it is not shown.
            positions = [str(i) for i, server in enumerate(listed, 1) if server.strip() in bad]
            entries = "entry" if len(positions) == 1 else "entries"
            raise bad_option(
                f"must list servers as host[:port]; {entries} {', '.join(positions)} "
                f"of {len(listed)} {'is' if len(positions) == 1 else 'are'} not"
            )
        return servers

    return pydantic.PlainValidator(read)


def split_url(url: str, broker: str, default_port: int) -> SplitResult:
    """``urlsplit(url)``, with its complaint as a :class:`BrokerOptionError` naming ``broker``
    (its example shows the broker's ``default_port``).

    The URL itself is left out of the message: it may carry a password.
    """
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise BrokerOptionError(
            f"the {broker} URL cannot be read ({exc}); an IPv6 host goes in brackets, "
            f"with its port after them: [::1]:{default_port}"
        ) from None


def broker_url_where(parts: SplitResult) -> str:
    """What messages about a broker URL's options say they are about."""
    return f"broker URL {redact_url(parts.geturl())!r}"
