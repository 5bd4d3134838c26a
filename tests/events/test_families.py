"""Every event type of gormes is placed in a family of streams on purpose
(gormes/events/families.py, decision 0086), and the streams gormes names for
each domain are of that domain's family."""

from __future__ import annotations

from gormes.events.approvals import APPROVALS_STREAM
from gormes.events.audit import audit_stream
from gormes.events.budgets import INDEX_STREAM, budget_stream
from gormes.events.catalog import load_all
from gormes.events.codec import default_codec
from gormes.events.cron import cron_stream
from gormes.events.families import ANY_STREAM, family_of, off_family
from gormes.events.jobs import job_stream
from gormes.events.mcp import mcp_stream
from gormes.events.memory import memory_stream
from gormes.events.redaction import REDACTIONS_STREAM
from gormes.events.retention import RETENTION_STREAM
from gormes.events.runs import run_stream
from gormes.events.skills import skill_stream


def test_every_type_of_gormes_has_a_family_or_is_declared_at_home_anywhere() -> None:
    load_all()
    # gormes's own: other tests register types of their own in the same codec (test.actor.*)
    ours = [t for t in default_codec.types() if default_codec.class_for(t).__module__.startswith("gormes.")]
    assert len(ours) > 50
    placed_nowhere = [t for t in ours if family_of(t) is None and t not in ANY_STREAM]
    assert placed_nowhere == []


def test_the_streams_gormes_names_are_of_their_types_family() -> None:
    made = {
        "approval.requested": APPROVALS_STREAM, "audit.operation": audit_stream(1_700_000_000_000),
        "budget.set": budget_stream("team"), "budget.indexed": INDEX_STREAM, "cron.fired": cron_stream("daily"),
        "job.submitted": job_stream("j1"), "mcp.catalog_listed": mcp_stream("files"),
        "memory.fact_recorded": memory_stream("chat:c1"), "run.started": run_stream("r1"),
        "run.approval_requested": run_stream("r1"), "skill.feedback": skill_stream("alpha"),
        "log.redacted": REDACTIONS_STREAM, "log.retained": RETENTION_STREAM,
        "budget.exhausted": budget_stream("index"),  # a budget may be named "index"
    }
    assert {t: off_family(stream, t) for t, stream in made.items()} == dict.fromkeys(made)


def test_an_event_elsewhere_is_named_with_its_family() -> None:
    assert off_family("notes-1", "memory.forgotten") == (
        "type 'memory.forgotten' belongs on a stream 'memory-<name>', not on 'notes-1'")
    assert off_family("approvals-2", "approval.decided") == (
        "type 'approval.decided' belongs on the stream 'approvals', not on 'approvals-2'")
    assert off_family("run-", "run.started") is not None  # a family's prefix alone names nothing
    assert off_family("job-1", "run.started") is not None
    assert off_family("run-1", "job.submitted") is not None
    assert off_family("budget-team", "budget.indexed") is not None
    assert off_family("anything", "note.added") is None
    assert off_family("anything", "plugin.thing") is None  # a user's own type: no reader of gormes trusts it
