"""What a replay reports: the `Divergence`, the state at `--until`, one `RunReplay`
per run (children nested), and one-line descriptions of recorded observations."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

import msgspec

from gormes.events.approvals import RunApprovalDecided, RunApprovalRequested
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    RunCancelled,
    RunChildFinished,
    RunChildSpawned,
    RunSpawnRefused,
    RunClockRead,
    RunCompleted,
    RunFailed,
    RunInboxRead,
    RunLlmCut,
    RunLlmFailed,
    RunLlmTurn,
    RunLogged,
    RunProgressed,
    RunRandomDrawn,
    RunTokensAdded,
    RunToolCalled,
)

ReplayStatus = Literal[
    "completed", "failed", "cancelled",  # the handler ended as the recorded run did
    "diverged",  # stopped at the first divergence
    "stopped",  # --until reached
    "unfinished",  # the recording ends before the run did (it was still going)
    "not replayed",  # a child served from its recorded outcome (--no-children, or not in the file)
    "redacted",  # stopped at an observation (or the end) whose data was redacted (decision 0026)
]


class Difference(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One thing that differs between a recorded call and the code's.

    `what` is "model", "message", "tools", "temperature", "max_tokens" (a model
    request) or "operation", "argument", "arguments" (a tool call); `path` says
    where exactly ("messages[2].tool_calls[0].arguments", "tools", "arguments.path").
    Values are cut to a readable length around where they first differ; None is
    "not there" (a message or argument only one side has)."""

    what: str
    path: str
    recorded: str | None = None
    asked: str | None = None
    index: int | None = None  # a message's index in the request
    role: str | None = None  # and its role
    added: tuple[str, ...] = ()  # tools the code offers and the recording did not
    removed: tuple[str, ...] = ()  # and the other way round

    def line(self) -> str:
        if self.what == "tools":
            if self.added or self.removed:
                parts = [f"added {', '.join(self.added)}"] if self.added else []
                parts += [f"removed {', '.join(self.removed)}"] if self.removed else []
                return f"tools offered: {'; '.join(parts)}"
            if self.path == "tools":
                return "tools offered: the same tools in another order"
            return f"tools offered: same names, different schema of {self.path[6:-1]}"
        if self.what == "message":
            where = f"message {self.index} ({self.role})"
            field = self.path.partition(".")[2]
            label = f"{where} {field}" if field else where
        elif self.what == "argument":
            label = f"argument {self.path.partition('.')[2]}"
        else:
            label = self.what
        if self.recorded is None:
            return f"{label}: only in the code: {self.asked}"
        if self.asked is None:
            return f"{label}: only in the recording: {self.recorded}"
        return f"{label}: recorded {self.recorded}, code asked {self.asked}"


class DivergenceDiff(msgspec.Struct, frozen=True, kw_only=True):
    """What differs at a divergence: `kind` "llm" (a model request) or "tool"."""

    kind: str
    differences: tuple[Difference, ...] = ()
    note: str | None = None  # what the recording could not show

    def lines(self) -> list[str]:
        lines = [d.line() for d in self.differences]
        return [*lines, self.note] if self.note else lines


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """The first point where the code asked for something other than the recording."""

    run_id: str
    position: int  # the log position of the recorded event compared
    seq: int | None  # the observation's seq (an extra call: the seq asked for; the end: None)
    recorded: str
    asked: str
    diff: DivergenceDiff | None = None  # for a model request or a tool call: what differs

    def line(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "the run's end"
        return (
            f"divergence at position {self.position} ({where}) in run {self.run_id}: "
            f"recorded {self.recorded}, code asked {self.asked}"
        )

    def diff_lines(self) -> list[str]:
        return self.diff.lines() if self.diff is not None else []


class RunState(msgspec.Struct, frozen=True, kw_only=True):
    """A run as reconstructed at a position (`--until`)."""

    run_id: str
    position: int  # the last event served
    seq: int  # observations served
    iterations: int  # model turns served
    tokens: Tokens  # the run's total so far, children's reported totals included
    # The conversation as the code last built it: the messages of its latest model
    # request (the one it was about to send, if it got that far) and the reply served.
    messages: list[Any]
    children: list[str]


class RunReplay(msgspec.Struct, kw_only=True):
    run_id: str
    handler: str
    status: ReplayStatus
    exact: bool
    events: int  # recorded events reproduced: run.started, observations served, the end
    divergence: Divergence | None = None
    handler_version_changed: bool = False
    state: RunState | None = None
    notes: list[str] = []
    children: list[RunReplay] = []

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def total_events(self) -> int:
        return sum(r.events for r in self.walk())

    @property
    def tree_exact(self) -> bool:
        return all(r.exact for r in self.walk())

    @property
    def first_divergence(self) -> Divergence | None:
        found = [r.divergence for r in self.walk() if r.divergence is not None]
        return min(found, key=lambda d: d.position) if found else None


def redacted_note(record: Any) -> str:
    """What replay says of a redacted observation (a `Recorded` of a `RedactedEvent`)."""
    t = record.event.redacted
    day = datetime.fromtimestamp(t.at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    what = f"observation at seq {t.seq}" if t.seq is not None else f"{record.type} event"
    return (f"{what} (position {record.position}) was redacted on {day} by {t.by} ({t.reason}): "
            "cannot replay exactly past it")


def _short(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value, order="sorted").decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(event: Any) -> str:
    """A recorded event in a few words, in the same terms as what the code asks."""
    if isinstance(event, RunLlmTurn):
        return f"llm model={event.model} request {event.request_hash[:12]} ({event.message_count} messages)"
    if isinstance(event, RunLlmFailed):
        return (
            f"llm model={event.model} request {event.request_hash[:12]} "
            f"(attempt {event.attempt} failed: {_short(event.error, 60)})"
        )
    if isinstance(event, RunLlmCut):
        return f"llm model={event.model} request {event.request_hash[:12]} (cut short after {event.duration_ms} ms)"
    if isinstance(event, RunToolCalled):
        return f"tool {event.operation} {_short(event.arguments)}"
    if isinstance(event, RunChildSpawned):
        tools = f" tools={list(event.tools)}" if event.tools is not None else ""
        return f"spawn {event.handler} {_short(event.input)}{tools}"
    if isinstance(event, RunSpawnRefused):
        tools = f" tools={list(event.tools)}" if event.tools is not None else ""
        return f"spawn {event.handler} {_short(event.input)}{tools} (refused: {_short(event.reason, 60)})"
    if isinstance(event, RunChildFinished):
        return f"result of child {event.child_run_id}"
    if isinstance(event, RunInboxRead):
        return "inbox read"
    if isinstance(event, RunClockRead):
        return "clock read"
    if isinstance(event, RunRandomDrawn):
        return "random draw"
    if isinstance(event, RunProgressed):
        return f"progress {_short(event.progress)}"
    if isinstance(event, RunTokensAdded):
        written = f", +{event.cache_write} written to the cache" if event.cache_write else ""
        return f"tokens +{event.input} in, +{event.output} out, +{event.cache_read} cached{written}"
    if isinstance(event, RunLogged):
        return f"log {event.level} {_short(event.message)}"
    if isinstance(event, RunApprovalRequested):
        return f"approval of tool {event.operation} requested ({event.approval_id})"
    if isinstance(event, RunApprovalDecided):
        return f"approval {event.approval_id} {event.decision} by {event.by}"
    if isinstance(event, RunCompleted):
        return f"the end of the run (completed with {_short(event.result, 60)})"
    if isinstance(event, RunFailed):
        return f"the end of the run (failed: {_short(event.error, 60)})"
    if isinstance(event, RunCancelled):
        return f"the end of the run (cancelled: {_short(event.reason, 60)})"
    return getattr(event, "type", type(event).__name__)
