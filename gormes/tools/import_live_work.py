"""Live work an import would bring in, or reach into.

An imported `job.submitted` names its submitter, and an imported `cron.scheduled`
the trust its fires carry (`system`). Once imported, a worker runs such a job, and
the daemon fires such a schedule, with the trust the record names, whoever wrote
the file. Records appended to a run running here reach its agent (a
`run.message_sent` is read from its inbox, as from the sender it names), and a
decision appended for an approval requested here lets the call it holds run. So an
import is refused when it leaves

- a job not ended, or a cron schedule not removed (as the import leaves them: the
  stream's events already in the log included);
- a record on the stream of a run this log held before the import and that has
  not ended;
- a record on the stream of a budget this log held before the import (a raise,
  a reservation given back: the caps of the runs charged to it would lift;
  decision 0068);
- an approval decided in the file whose request is not in the file, or is a copy
  of one this log held pending (the id of a request is no secret), or that
  approves a run's call not yet made (resuming or forking the run makes it; both
  decision 0068);
- a memory or skill record that vouches for itself here: a fact or relationship
  recorded as trusted or reviewed, a review, a forget, a skill's feedback (a
  person's word on the other log; gormes/tools/import_memory_claims.py, decision
  0071),

unless the operator says it brings live work on purpose (`gormes import
--live-work`): restoring a host's own export, say. History (ended jobs, removed
schedules, runs the file brings whole, notes, an archived segment) imports as
before.

`LiveWorkWatch` is shown each line before it is appended, then asked what the
import left, inside the import's transaction. It reads only the job, cron and run
streams the import touched, and of runs only those the log held before; of
approvals, only those the file both requests and decides, once the log held any.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gormes.actors.cron import rules as cron_rules
from gormes.actors.jobs.state import evolve as evolve_job
from gormes.actors.runs.approval_book import approval_in
from gormes.events.approvals import APPROVALS_STREAM, Approval, ApprovalDecided, ApprovalRequested
from gormes.events.budgets import BUDGET_STREAM_PREFIX
from gormes.events.budgets import INDEX_STREAM as BUDGET_INDEX_STREAM
from gormes.events.cron import CRON_STREAM_PREFIX
from gormes.events.jobs import JobSubmitted, job_stream
from gormes.events.runs import TERMINAL_TYPES, RunStarted, run_stream
from gormes.tools.import_memory_claims import claim

if TYPE_CHECKING:
    from gormes.events.jsonl import ParsedLine

JOB_STREAM_PREFIX = job_stream("")
RUN_STREAM_PREFIX = run_stream("")
SHOWN = 3  # live items named in the refusal; the rest are counted


class LiveWorkWatch:
    """`within`: what a decision's request must be in to be history ("the file").
    `approval(tx, id)`: the approval as the import leaves it (`approval_in`)."""

    def __init__(self, within: str = "the file",
                 approval: Callable[[Any, str], Approval | None] = approval_in) -> None:
        self._within = within
        self._approval = approval
        self._jobs_and_schedules: set[str] = set()
        self._runs_seen: set[str] = set()
        self._runs_held_before: set[str] = set()
        self._budgets_seen: set[str] = set()
        self._budgets_held_before: set[str] = set()
        self._approvals_before: int | None = None  # the stream's version when the import first touched it
        self._requested: set[str] = set()
        self._decided: dict[str, ApprovalDecided] = {}  # approval id -> its first decision in the file
        self._claims: list[str] = []  # memory and skill records vouching for themselves (decision 0071)

    def see(self, tx: Any, line: ParsedLine) -> None:
        """Note `line`, before it is appended."""
        stream, event = line.stream, line.event
        if (phrase := claim(stream, event)) is not None:
            self._claims.append(phrase)
        elif stream.startswith((JOB_STREAM_PREFIX, CRON_STREAM_PREFIX)):
            self._jobs_and_schedules.add(stream)
        elif stream.startswith(RUN_STREAM_PREFIX):
            if stream not in self._runs_seen:
                self._runs_seen.add(stream)
                if tx.stream_version(stream) > 0:
                    self._runs_held_before.add(stream)
        elif stream.startswith(BUDGET_STREAM_PREFIX) and stream != BUDGET_INDEX_STREAM:
            if stream not in self._budgets_seen:
                self._budgets_seen.add(stream)
                if tx.stream_version(stream) > 0:
                    self._budgets_held_before.add(stream)
        elif stream == APPROVALS_STREAM:
            if self._approvals_before is None:
                self._approvals_before = tx.stream_version(APPROVALS_STREAM)
            if isinstance(event, ApprovalRequested):
                self._requested.add(event.approval_id)
            elif isinstance(event, ApprovalDecided):
                self._decided.setdefault(event.approval_id, event)

    def found(self, tx: Any) -> list[str]:
        """What the import leaves live, one phrase each ("job J (waiting, submitted
        as operator)"); empty when it brings only history."""
        found = []
        for stream in sorted(self._jobs_and_schedules):
            events = [record.event for record in tx.read_stream(stream)]
            phrase = _job(events) if stream.startswith(JOB_STREAM_PREFIX) else _schedule(events)
            if phrase is not None:
                found.append(phrase)
        for stream in sorted(self._runs_held_before):
            if _run_live([record.event for record in tx.read_stream(stream)]):
                found.append(f"records for run {stream.removeprefix(RUN_STREAM_PREFIX)}, live here")
        for stream in sorted(self._budgets_held_before):
            found.append(f"records for budget {stream.removeprefix(BUDGET_STREAM_PREFIX)}, held here")
        brought_whole = any(approval_id in self._requested for approval_id in self._decided)
        held_upto = self._approvals_held_upto(tx) if brought_whole else 0
        for approval_id, decided in self._decided.items():
            if approval_id not in self._requested:
                found.append(f"approval {approval_id} {decided.decision}, its request not in {self._within}")
            elif phrase := self._decision_that_acts(tx, decided, held_upto):
                found.append(phrase)
        return found + self._claims

    def _approvals_held_upto(self, tx: Any) -> int:
        """The position of the last approvals event the log held before the import
        (0: none)."""
        if not self._approvals_before:
            return 0
        return tx.read_stream(APPROVALS_STREAM, after_version=self._approvals_before - 1)[0].position

    def _decision_that_acts(self, tx: Any, decided: ApprovalDecided, held_upto: int) -> str | None:
        """A decision the file brings with its request, when it stands (the request
        was pending before) and lets a call run:

        - the request is a copy of one pending here (its id is no secret): the call
          held here runs;
        - it approves a run's call not yet made (no `approval.used`): resuming or
          forking that run makes the call with nobody here asked."""
        if not held_upto and decided.decision != "approved":
            return None
        approval = self._approval(tx, decided.approval_id)
        if approval is None or approval.decision != decided:
            return None
        said = f"approval {decided.approval_id} {decided.decision}"
        if held_upto and approval.requested_position <= held_upto:
            return f"{said}, requested here"
        run_id = approval.request.run_id
        if decided.decision == "approved" and run_id is not None and approval.used_by is None:
            return f"{said}, for run {run_id}, not yet used"
        return None


def _job(events: list[Any]) -> str | None:
    state = None
    for event in events:
        if state is not None or isinstance(event, JobSubmitted):  # a stream so named may hold other events
            state = evolve_job(state, event)
    if state is None or state.terminal:
        return None
    submitter = f"submitted as {state.submitter.trust}" if state.submitter is not None else "no submitter"
    return f"job {state.id} ({state.status}, {submitter})"


def _run_live(events: list[Any]) -> bool:
    """A run started and not ended (a stream so named that holds no `run.started`
    is no run)."""
    return (any(isinstance(event, RunStarted) for event in events)
            and not any(isinstance(event, TERMINAL_TYPES) for event in events))


def _schedule(events: list[Any]) -> str | None:
    state = None
    for event in events:
        state = cron_rules.evolve(state, event)
    if state is None or not state.live:
        return None
    return f"cron schedule {state.name} ({state.status})"


def refusal(name: str, found: list[str], *, done: str = "imported", do: str = "Import",
            source: str = "the file") -> str:
    """The one line refusing live work: `name` holds it; once `done` it acts here;
    `do` it only with --live-work."""
    shown = ", ".join(found[:SHOWN]) + (f" and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
    return (f"{name} holds live work: {shown}; once {done}, this log acts on it and believes it with"
            f" the trust its records name, whoever wrote {source}. {do} it only if you would stand"
            f" behind it yourself: --live-work. Nothing was {done}")
