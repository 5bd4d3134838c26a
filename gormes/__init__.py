"""gormes: an event-sourced actor runtime for AI agents."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `gormes.job` and `gormes.UnrecoverableError` load the handler registry only
    # when first used, so `import gormes` stays light.
    if name in ("job", "UnrecoverableError"):
        from gormes.actors.jobs import handlers

        return getattr(handlers, name)
    raise AttributeError(f"module 'gormes' has no attribute {name!r}")
