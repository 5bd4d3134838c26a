"""The official SDKs' errors (`openai`, `anthropic`) as `ProviderError`s.

Both SDKs raise the same family: `APIStatusError` (with the response: status,
headers, body), `APITimeoutError`, `APIConnectionError`; a stream that stalls or
drops after its headers raises the transport's own error (httpx2). Each becomes
one `ProviderError` whose text is never empty: it names the provider, the URL,
what happened and, for a timeout, after how long. SDK-internal retries are off
(`max_retries=0`): RunContext.llm retries and records every attempt itself.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import httpx2

from gormes.providers.base import ProviderError

RETRYABLE_STATUSES = frozenset({408, 409, 429})


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a `retry-after-ms` or `retry-after` header asks us to wait (a number
    of seconds or an HTTP date), or None if there is none or it does not parse."""
    if not headers:
        return None
    for key, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(key)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            if scale != 1.0:
                continue
            parsed = email.utils.parsedate_tz(value)
            if parsed is None:
                continue
            seconds = email.utils.mktime_tz(parsed) - time.time()
        if seconds >= 0:
            return seconds
    return None


def _detail(body: Any, text: str, reason: str) -> str:
    message = None
    if isinstance(body, dict):
        error = body.get("error")
        message = body.get("message")
        if isinstance(error, dict):
            message = error.get("message") or message
    if not isinstance(message, str) or not message.strip():
        message = text
    return " ".join(message.split())[:300] or reason


def status_error(name: str, status: int, headers: Mapping[str, str], body: Any, text: str, reason: str) -> ProviderError:
    retryable = status in RETRYABLE_STATUSES or status >= 500
    return ProviderError(
        f"{name}: HTTP {status}: {_detail(body, text, reason)}",
        retryable=retryable, status=status, retry_after=retry_after(headers) if retryable else None,
    )


def _cause(exc: BaseException) -> str:
    while exc.__cause__ is not None and not str(exc):
        exc = exc.__cause__
    return str(exc) or type(exc).__name__


@contextmanager
def translated(name: str, url: str, timeout: float, sdk: ModuleType) -> Iterator[None]:
    """Inside: any error of `sdk` or of its transport comes out as a ProviderError."""
    try:
        yield
    except sdk.APIStatusError as exc:
        response = exc.response
        try:
            text = response.text
        except httpx2.ResponseNotRead:
            text = ""
        raise status_error(name, exc.status_code, response.headers, exc.body, text, response.reason_phrase) from None
    except (sdk.APITimeoutError, httpx2.TimeoutException):
        raise ProviderError(f"{name}: timed out after {float(timeout)} s waiting for {url}", retryable=True) from None
    except sdk.APIConnectionError as exc:
        raise ProviderError(f"{name}: cannot reach {url}: {_cause(exc.__cause__ or exc)}", retryable=True) from None
    except httpx2.TransportError as exc:
        raise ProviderError(f"{name}: the connection to {url} broke: {_cause(exc)}", retryable=True) from None
