"""`--import MODULE_OR_FILE`: the one loader of users' code, for every command.

One import brings in whatever the module declares: operations
(`@gormes.operation`), run handlers (`@gormes.run_handler`) and job handlers
(`@gormes.job`). After the imports the declared operations are checked against
the built-ins (`default_registry()`), so a clash is one line before anything
runs; a command builds its operation registry after this, from `default_registry()`.

    load_imports(["mytools", "./agents.py"])
    registry = default_registry()  # built-ins + what they declared

`reload` (the daemon's SIGHUP: the specs it loaded before) names the modules to
reload when they are already imported (files are executed afresh every time);
what a module or file declared before is forgotten first, so its new code
replaces it. A failed load leaves the declared operations as they were.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Container, Iterable

import trio

from gormes.actors.jobs.handlers import HandlerImportError, file_module_name, import_handlers, is_file_spec
from gormes.actors.runs.context import run_handlers
from gormes.ops.declared import declared


def load_imports(specs: Iterable[str], *, reload: Container[str] = ()) -> None:
    """Import each spec (a dotted module or a `.py` file) in order, then check
    what they declared. Raises a `UserError` (one line) on any failure."""
    specs = list(specs)
    if not specs:
        return
    run_handlers.names()  # the built-in run handlers first, so an imported module may replace one
    saved = declared.snapshot()
    try:
        for spec in specs:
            _load(spec, reload=spec in reload)
        if declared.snapshot() != saved:
            # Lazy for start-up time: the built-ins (knowledge, skills, their
            # sqlite-utils and yaml) load only to check operations declared against
            # them; a worker importing job handlers alone starts ~0.15 s sooner.
            from gormes.tools.builtin import default_registry

            default_registry()
    except BaseException:
        declared.restore(saved)
        raise


def _load(spec: str, *, reload: bool) -> None:
    if is_file_spec(spec):
        declared.forget_module(file_module_name(spec))
        import_handlers(spec)
    elif reload and spec in sys.modules:
        declared.forget_module(spec)
        _reload_module(spec)
    else:
        import_handlers(spec)


def _reload_module(spec: str) -> None:
    try:
        importlib.reload(sys.modules[spec])
    except BaseException as exc:  # noqa: BLE001 - a broken module is the user's input
        if isinstance(exc, (KeyboardInterrupt, trio.Cancelled)):
            raise
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise HandlerImportError(
            f"cannot reload handlers from {spec!r}: {type(exc).__name__}{': ' + detail if detail else ''}"
        ) from None
