"""gormes: an event-sourced actor runtime for AI agents."""

__version__ = "0.1.0"
