"""What a request's ``Prefer`` headers ask of a call (RFC 7240): :class:`Preference`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Preference:
    """What a request's ``Prefer`` headers ask for (RFC 7240): ``respond-async``, ``wait``."""

    respond_async: bool = False
    wait: float | None = None

    @classmethod
    def of(cls, values: list[str]) -> Preference:
        """From the values of every ``Prefer`` header; preferences not understood are
        ignored, as RFC 7240 asks."""
        respond_async, wait = False, None
        for value in values:
            for preference in value.split(","):
                token, _, parameter = preference.split(";", 1)[0].partition("=")
                name = token.strip().lower()
                if name == "respond-async":
                    respond_async = True
                elif name == "wait":
                    try:
                        wait = max(0.0, float(parameter.strip().strip('"')))
                    except ValueError:
                        continue
        return cls(respond_async, wait)
