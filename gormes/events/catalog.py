"""Imports every domain module so that the default codec knows all event types.

Domain modules register their classes on import; anything that decodes the whole
log (the CLI, projections, the doctor) calls `load_all()` first.
"""

from __future__ import annotations

import importlib

DOMAIN_MODULES = (
    "gormes.events.notes",
    "gormes.events.jobs",
    "gormes.events.runs",
    "gormes.events.audit",
    "gormes.events.cron",
    "gormes.events.skills",
    "gormes.events.memory",
    "gormes.events.mcp",
    "gormes.events.redaction",
    "gormes.events.retention",
    "gormes.events.imports",
    "gormes.events.budgets",
    "gormes.events.approvals",
)


def load_all() -> None:
    for name in DOMAIN_MODULES:
        importlib.import_module(name)
