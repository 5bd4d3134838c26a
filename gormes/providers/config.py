"""Settings both HTTP providers share: where each comes from, first found wins
(the argument, then the environment), and one clear line when one is wrong."""

from __future__ import annotations

from collections.abc import Mapping

from gormes.errors import UserError

DEFAULT_TIMEOUT = 120.0


def first(*values: str | None) -> str | None:
    return next((v for v in values if v), None)


def positive_number(name: str, value: float | str | None, source: str, default: float) -> float:
    """`value` as a positive number of seconds (or tokens), else `UserError`."""
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}: {source} must be a number, not {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise UserError(f"{name}: {source} must be positive, not {value!r}")
    return number


def model_timeout(name: str, timeout: float | None, env: Mapping[str, str]) -> float:
    """The seconds to wait for the server (to connect, and between the bytes of a
    reply): `timeout`, else `GORMES_MODEL_TIMEOUT`, else 120."""
    if timeout is not None:
        return positive_number(name, timeout, "the timeout", DEFAULT_TIMEOUT)
    return positive_number(name, env.get("GORMES_MODEL_TIMEOUT"), "GORMES_MODEL_TIMEOUT", DEFAULT_TIMEOUT)
