"""gormes: an event-sourced actor runtime for AI agents.

What is public, said once: the names in `__all__` below, and the model-provider
interface in `gormes.providers` (its own `__all__`, with `gormes.providers.pricing`
for prices and cost; see docs/providers.md). Everything else, every other module
and every name that is not listed there, is internal and may change in any
release. The CLI (`gormes ...`) is public too, as the README's command reference
describes it.

    import gormes

    @gormes.job("resize")
    async def resize(ctx: gormes.JobContext, data): ...

    @gormes.run_handler("triage")
    async def triage(ctx: gormes.RunContext, input): ...

    @gormes.operation("weather.get", trust=["operator", "child-agent"])
    async def weather(ctx: gormes.OperationContext, input: WeatherIn) -> WeatherOut: ...

    async with gormes.open_store("gormes.db") as store:
        queue = await gormes.JobQueue.open(store)
        await queue.submit("resize", {"path": "cat.png"})
"""

# How this file is laid out (as trio's __init__ is): the public names live in
# the internal modules that own them, and are re-exported here. They are loaded
# on first use (PEP 562 `__getattr__`), because `import gormes` must stay light:
# the CLI imports this package before it knows which command runs, and
# `gormes --help` loads no trio, msgspec or sqlite3 (tests/cli/test_cli_startup.py).
# The TYPE_CHECKING block below says the same names to type checkers and IDEs,
# which do not run `__getattr__`. A name added to `_EXPORTS` is public: add it to
# the TYPE_CHECKING block too (tests/test_public_api.py checks that they agree).
# `TYPE_CHECKING = False` rather than importing it: `typing` alone costs more to
# import than the rest of this file, and mypy and pyright read the name the same way.

TYPE_CHECKING = False

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # jobs: handlers a worker runs, and the queue they are submitted to
    "job": "gormes.actors.jobs.handlers",
    "UnrecoverableError": "gormes.actors.jobs.handlers",
    "JobContext": "gormes.actors.jobs.context",
    "JobQueue": "gormes.actors.jobs.queue",
    # runs: handlers that reach the world only through their context, so replay is exact
    "run_handler": "gormes.actors.runs.context",
    "RunContext": "gormes.actors.runs.context",
    "ChildRun": "gormes.actors.runs.context",
    "ChildOutcome": "gormes.actors.runs.context",
    "ToolCallFailed": "gormes.actors.runs.context",
    "SpawnRefused": "gormes.actors.runs.context",
    # operations: users' tools, checked, audited and replayed like the built-ins
    "operation": "gormes.ops.declared",
    "OperationContext": "gormes.ops.spec",
    "Caller": "gormes.ops.spec",
    # the log: its stores, the event base types and what a read returns
    "open_store": "gormes.events.open",
    "EventStore": "gormes.events.store",
    "AppendResult": "gormes.events.store",
    "ANY": "gormes.events.store",
    "NO_STREAM": "gormes.events.store",
    "Event": "gormes.events.base",
    "UnknownEvent": "gormes.events.base",
    "Recorded": "gormes.events.base",
    # errors: the base of every error gormes raises on purpose, and the ones a caller handles
    "GormesError": "gormes.errors",
    "UserError": "gormes.errors",
    "ConcurrencyError": "gormes.errors",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    from gormes.actors.jobs.context import JobContext
    from gormes.actors.jobs.handlers import UnrecoverableError, job
    from gormes.actors.jobs.queue import JobQueue
    from gormes.actors.runs.context import ChildOutcome, ChildRun, RunContext, SpawnRefused, ToolCallFailed, run_handler
    from gormes.errors import ConcurrencyError, GormesError, UserError
    from gormes.events.base import Event, Recorded, UnknownEvent
    from gormes.events.open import open_store
    from gormes.events.store import ANY, NO_STREAM, AppendResult, EventStore
    from gormes.ops.declared import operation
    from gormes.ops.spec import Caller, OperationContext


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gormes' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
