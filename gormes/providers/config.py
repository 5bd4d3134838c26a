"""Settings both HTTP providers share: where each comes from, first found wins
(the argument, then the environment), and one clear line when one is wrong."""

from __future__ import annotations

from collections.abc import Mapping

from gormes.errors import UserError
from gormes.settings import count_setting

DEFAULT_TIMEOUT = 120.0


def first(*values: str | None) -> str | None:
    return next((v for v in values if v), None)


def endpoint(name: str, vendor: str, base_url: str | None, api_key: str | None, env: Mapping[str, str],
             default_url: str) -> tuple[str, str | None]:
    """(the base URL, the API key): the arguments, else `GORMES_<VENDOR>_BASE_URL` /
    `GORMES_<VENDOR>_API_KEY`, else `<VENDOR>_BASE_URL` / `<VENDOR>_API_KEY`; the URL
    defaults to the vendor's own API, which needs a key."""
    url = (first(base_url, env.get(f"GORMES_{vendor}_BASE_URL"), env.get(f"{vendor}_BASE_URL"))
           or default_url).rstrip("/")
    key = first(api_key, env.get(f"GORMES_{vendor}_API_KEY"), env.get(f"{vendor}_API_KEY"))
    if not key and url == default_url.rstrip("/"):
        raise UserError(
            f"{name}: no API key: set GORMES_{vendor}_API_KEY or {vendor}_API_KEY "
            "(or a base URL for a local server that needs none)"
        )
    return url, key


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


DEFAULT_RETRIES = 3


def model_retries(retries: int | None, env: Mapping[str, str]) -> int:
    """How many times a run retries a model request that failed retryably (each
    attempt recorded as run.llm_failed): `retries`, else `GORMES_MODEL_RETRIES`, else 3."""
    return count_setting(retries, "the retries", env, "GORMES_MODEL_RETRIES", DEFAULT_RETRIES)
