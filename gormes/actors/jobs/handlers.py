"""Job handlers: the registry a worker claims from, and the built-in handlers.

A handler is an async function `(ctx, data) -> result`; `ctx` is the job's
`JobContext`, `data` the job's JSON data, and the result must be JSON-encodable.

    import gormes

    @gormes.job("resize")
    async def resize(ctx, data):
        await ctx.progress({"step": 1, "total": 2})
        return {"ok": True}

Raising `UnrecoverableError` sends the job straight to `dead`; any other
exception is a failure that is retried by the job's backoff until its attempts
run out. Built in: `echo` and `sleep`. The `agent` handler (an agent run as a job)
sits above the jobs, with the runs it drives: whoever wires a worker installs it
(gormes/actors/agent_jobs/install.py). Modules of handlers are loaded by
`gormes worker --import`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from gormes.errors import UserError

if TYPE_CHECKING:
    from gormes.actors.jobs.context import JobContext

Handler = Callable[["JobContext", Any], Awaitable[Any]]


class UnrecoverableError(Exception):
    """Raised by a handler: the job goes `dead` at once, without retries."""


class HandlerImportError(UserError):
    """A `--import` module or file could not be loaded."""


class InvalidHandler(UserError):
    """A handler registered with an empty name or a function that is not async."""


class HandlerRegistry:
    """Job names mapped to the handlers that run them."""

    def __init__(self, handlers: dict[str, Handler] | None = None) -> None:
        self._handlers: dict[str, Handler] = dict(handlers or {})

    def register(self, name: str, handler: Handler) -> Handler:
        if not name or not name.strip():
            raise InvalidHandler("a job handler needs a non-empty name")
        if not callable(handler):
            raise InvalidHandler(f"handler for {name!r} is not callable")
        self._handlers[name] = handler
        return handler

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def copy(self) -> HandlerRegistry:
        return HandlerRegistry(self._handlers)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._handlers)


# Where `@gormes.job` registers; workers start from a copy of it.
default_registry = HandlerRegistry()


def job(name: str, *, registry: HandlerRegistry | None = None) -> Callable[[Handler], Handler]:
    """Decorator: register an async `(ctx, data) -> result` handler for jobs named `name`."""

    def decorate(fn: Handler) -> Handler:
        return (registry or default_registry).register(name, fn)

    return decorate


# -- built-in handlers --------------------------------------------------------


@job("echo")
async def echo(ctx: JobContext, data: Any) -> Any:
    """Return the job's data as its result."""
    return data


@job("sleep")
async def sleep(ctx: JobContext, data: Any) -> dict[str, int]:
    """Sleep `{"ms": N}` milliseconds; cancellable at any moment (pause, cancel, timeout)."""
    ms = data.get("ms", 0) if isinstance(data, dict) else data
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms < 0:
        raise UnrecoverableError(f'sleep wants {{"ms": N}} with N >= 0, got {data!r}')
    await trio.sleep(ms / 1000)
    return {"slept_ms": int(ms)}


# -- loading handler modules --------------------------------------------------


def import_handlers(spec: str) -> None:
    """Import a module by dotted name, or a `.py` file by path, so its `@job`s register.

    Any failure (missing module, syntax error, an exception at import time) becomes
    one `HandlerImportError` line naming what was asked and what went wrong.
    """
    path = Path(spec)
    try:
        if is_file_spec(spec):
            _import_file(path)
        else:
            importlib.import_module(spec)
    except HandlerImportError:
        raise
    except UserError as exc:
        # A declaration the module makes was refused (an operation declared twice,
        # say): its own line says what is wrong.
        raise HandlerImportError(f"cannot import {spec!r}: {exc}") from None
    except BaseException as exc:  # noqa: BLE001 - any import failure is the user's input
        if isinstance(exc, (KeyboardInterrupt, trio.Cancelled)):
            raise
        detail = str(exc).splitlines()[0] if str(exc) else ""
        kind = type(exc).__name__
        raise HandlerImportError(
            f"cannot import handlers from {spec!r}: {kind}{': ' + detail if detail else ''}"
        ) from None


def is_file_spec(spec: str) -> bool:
    """Whether an `--import` spec names a `.py` file rather than a dotted module."""
    return spec.endswith(".py") or Path(spec).is_file()


def file_module_name(path: Path | str) -> str:
    """The name a `.py` file is imported under: the same for the same file, so a
    file imported again replaces its module rather than adding one."""
    return f"gormes_handlers_{abs(hash(str(Path(path).resolve())))}"


def _import_file(path: Path) -> None:
    if not path.is_file():
        raise HandlerImportError(f"cannot import handlers from {str(path)!r}: no such file")
    module_name = file_module_name(path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise HandlerImportError(f"cannot import handlers from {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
