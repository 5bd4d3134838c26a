"""Counts the operator sets in the environment or passes in code: one rule for each,
and one clear line when one is wrong."""

from __future__ import annotations

from collections.abc import Mapping

from gormes.errors import UserError


def count_setting(given: int | None, name: str, env: Mapping[str, str], variable: str, default: int) -> int:
    """A count of 0 or more: `given`, else the environment's `variable`, else `default`."""
    source, value = (name, given) if given is not None else (variable, env.get(variable))
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{source} must be a whole number, not {value!r}") from None
    if number < 0:
        raise UserError(f"{source} must be 0 or more, not {value!r}")
    return number
