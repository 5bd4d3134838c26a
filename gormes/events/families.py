"""Which streams each event type lives on: its family (decision 0086).

gormes writes every event of a domain on the streams of one family: a memory
record on `memory-<scope>`, a run's on `run-<id>`, a job's on `job-<id>`, and so
on. The import's checks (gormes/tools/import_live_work.py) and the readers look
for each kind of record on its family's streams, so a record on another stream
would be read as what it names while passing the checks made for its family (a
trusted fact on `notes-1`, a `run.started` on `zzzz<id>`). The doors that take
events from outside (`events.append`, `events.import`, a migration's
continuation) refuse an event off its family with `off_family`.

A type's family is found by its namespace (the part before the first dot), so a
new `run.*` type belongs to the run family without being listed; `BY_TYPE` names
the types whose family is narrower than their namespace's. A type of no listed
namespace (a note, a user's own event type) may be on any stream: no reader of
gormes derives trust from it.
"""

from __future__ import annotations

from typing import NamedTuple

from gormes.events.approvals import APPROVALS_STREAM
from gormes.events.audit import AUDIT_STREAM_PREFIX
from gormes.events.budgets import BUDGET_STREAM_PREFIX, INDEX_STREAM
from gormes.events.cron import CRON_STREAM_PREFIX
from gormes.events.jobs import job_stream
from gormes.events.mcp import mcp_stream
from gormes.events.imports import IMPORTS_STREAM
from gormes.events.memory import memory_stream
from gormes.events.redaction import REDACTIONS_STREAM
from gormes.events.retention import RETENTION_STREAM
from gormes.events.runs import run_stream
from gormes.events.skills import skill_stream


class Family(NamedTuple):
    """Streams named `prefix` followed by a non-empty name, or exactly `prefix` (`exact`)."""

    prefix: str
    exact: bool = False

    def holds(self, stream: str) -> bool:
        if self.exact:
            return stream == self.prefix
        return len(stream) > len(self.prefix) and stream.startswith(self.prefix)

    def describe(self) -> str:
        return f"the stream {self.prefix!r}" if self.exact else f"a stream '{self.prefix}<name>'"


BY_NAMESPACE: dict[str, Family] = {
    "approval": Family(APPROVALS_STREAM, exact=True),
    "audit": Family(AUDIT_STREAM_PREFIX),
    "budget": Family(BUDGET_STREAM_PREFIX),  # budget-index too: a budget may be named "index"
    "cron": Family(CRON_STREAM_PREFIX),
    "job": Family(job_stream("")),
    "mcp": Family(mcp_stream("")),
    "memory": Family(memory_stream("")),
    "run": Family(run_stream("")),
    "skill": Family(skill_stream("")),
}

BY_TYPE: dict[str, Family] = {
    "budget.indexed": Family(INDEX_STREAM, exact=True),
    "log.imported": Family(IMPORTS_STREAM, exact=True),
    "log.redacted": Family(REDACTIONS_STREAM, exact=True),
    "log.retained": Family(RETENTION_STREAM, exact=True),
}

# Types that may be on any stream: annotations people and actors add anywhere.
ANY_STREAM: frozenset[str] = frozenset({"note.added"})


def family_of(type_: str) -> Family | None:
    """The family of streams events of `type_` belong on; None: any stream."""
    return BY_TYPE.get(type_) or BY_NAMESPACE.get(type_.split(".", 1)[0])


def off_family(stream: str, type_: str) -> str | None:
    """Why an event of `type_` may not be on `stream` (a phrase), or None when it may."""
    family = family_of(type_)
    if family is None or family.holds(stream):
        return None
    return f"type {type_!r} belongs on {family.describe()}, not on {stream!r}"
