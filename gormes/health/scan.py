"""The doctor's log scan, kept from one run to the next: what the log-wide checks need.

The checks that read the whole log (positions and gaps, event types, which runs
can be replayed, runs with no end, runs awaiting memory extraction) read one
`LogSummary` instead. It is folded from the events after the position the last
doctor run remembered, so a doctor run costs what was appended since, not the
log. The doctor keeps it in the `doctor_scan` table of the database, the SQLite
file or the gormes schema of PostgreSQL alike (gormes/events/kept_fold.py,
decision 0084: written on a connection of its own after the checks, and only if
it can be written at once: a locked or read-only file, or a role that may not
create or write the table, just means the next run folds more).
`gormes doctor --full` folds from position 0 and, on SQLite, runs `PRAGMA
quick_check`, which is whole-file by nature; without `--full` the integrity
verdict is the last full scan's, with its age (the first doctor run of a
database is full).

What an incremental run cannot see, a full one does: a row deleted or edited
below the remembered position. The summary holds no payload text (types, run
ids, handler names, counts), so erasure does not reach into it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from gormes.events import kept_fold
from gormes.events.families import off_family
from gormes.events.runs import OBSERVATION_TYPES, TERMINAL_TYPES

TABLE = "doctor_scan"
ROW = "log"
PAGE = 20_000
_OBSERVED = frozenset(cls.__struct_config__.tag for cls in OBSERVATION_TYPES)
_ENDS = frozenset(cls.__struct_config__.tag for cls in TERMINAL_TYPES)
_CUT = "run.llm_cut"
_RETAINED = "log.retained"  # retention deleted rows: a summary kept from before counted them
_WITH_DATA = ("run.started", *_OBSERVED, _CUT)
MODEL_DAYS = 8  # days of model turns kept (UTC), for a window of the last 7


class RunMark(msgspec.Struct, kw_only=True):
    """A run with no end yet: what its replay check and the cut-off check need."""

    started: bool = False
    handler: str | None = None
    job_id: str | None = None
    observations: int = 0
    top: int = 0  # the highest seq
    missing: list[int] = []  # seqs below `top` not seen yet
    repeated: bool = False
    reasons: list[str] = []  # what the log itself says is wrong (a bad start)
    unread: dict[str, int] = {}  # "type@version" -> events, of types unknown when folded


class HandlerRuns(msgspec.Struct, kw_only=True):
    runs: int = 0
    first: list[str] = []  # the smallest few run ids (what a listing names)


class ModelDay(msgspec.Struct, kw_only=True):
    """One UTC day's model turns: those read (`run.llm_turn`) and those cut short
    after their requests left (`run.llm_cut`, decision 0080), with the tokens
    (input and output) each reported."""

    turns: int = 0
    tokens: int = 0
    cut: int = 0
    cut_tokens: int = 0
    cut_runs: list[str] = []  # the smallest few run ids (what a listing names)


class LogSummary(msgspec.Struct, kw_only=True):
    position: int = 0  # events folded: every position up to here
    count: int = 0
    low: int = 0
    high: int = 0
    types: dict[str, int] = {}  # "type@version" -> events
    started: int = 0
    handlers: dict[str, HandlerRuns] = {}
    open_runs: dict[str, RunMark] = {}
    unreplayable: dict[str, list[str]] = {}  # ended runs whose recording is incomplete
    unread_runs: dict[str, dict[str, int]] = {}  # ended runs with events of types unknown then
    awaiting: dict[str, float] = {}  # completed run -> when, not cited by an extraction
    cited_early: list[str] = []  # runs an extraction cited before they completed
    last_extracted: float | None = None
    # The audit chain: days before `audit_day` were verified whole and do not change
    # (a record goes to the day of its `at`); `audit_day` and after are verified again.
    audit_day: str | None = None
    audit_days_before: int = 0
    audit_sealed_before: int = 0
    audit_broken_before: list[str] = []
    audit_imported_before: list[str] = []  # those days' records brought by an import (decision 0087)
    audit_imports_seen: int = 0  # the newest `log.imported` those days were walked after
    integrity_at: float | None = None  # when the last full PRAGMA quick_check ran
    integrity: list[str] = []  # what it found
    model_days: dict[str, ModelDay] = {}  # "YYYY-MM-DD" -> that day's turns, the last MODEL_DAYS
    # Events off their type's family of streams (an older gormes imported them;
    # decision 0086): type -> events, and the first few positions.
    off_family: dict[str, int] = {}
    off_family_first: list[int] = []


def type_key(type_: str, type_version: int) -> str:
    return f"{type_}@{type_version}"


def split_key(key: str) -> tuple[str, int]:
    type_, _, version = key.rpartition("@")
    return type_, int(version)


_KEEP = 5


def _remember_first(ids: list[str], run_id: str) -> None:
    if len(ids) < _KEEP or run_id < ids[-1]:
        ids.append(run_id)
        ids.sort()
        del ids[_KEEP:]


def _json(data: Any) -> Any:
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, TypeError):
        return None


def _cited_run(value: dict[str, Any]) -> tuple[bool, str | None]:
    prov = value.get("provenance") if isinstance(value.get("provenance"), dict) else {}
    kind = prov.get("kind") or value.get("provenance_kind")
    origin = prov.get("origin") if isinstance(prov.get("origin"), dict) else value.get("origin")
    run_id = origin.get("run_id") if isinstance(origin, dict) else None
    return kind == "extracted", run_id


class Folder:
    """Folds rows (position, stream, version, type, type_version, data or None,
    recorded_at) into a summary; `known(type, version)` says whether this gormes
    reads a type."""

    def __init__(self, summary: LogSummary, known: Any) -> None:
        self.s = summary
        self.known = known
        self.retained = False  # a `log.retained` was folded

    def fold(self, rows: Iterable[tuple[Any, ...]]) -> None:
        s = self.s
        types = s.types
        for position, stream, version, type_, tv, data, recorded_at in rows:
            s.count += 1
            s.low = position if s.low == 0 else min(s.low, position)
            s.high = max(s.high, position)
            key = type_key(type_, tv)
            types[key] = types.get(key, 0) + 1
            if off_family(stream, type_) is not None:
                s.off_family[type_] = s.off_family.get(type_, 0) + 1
                if len(s.off_family_first) < 3:
                    s.off_family_first.append(position)
            if stream.startswith("run-"):
                self._run(stream[4:], version, type_, tv, key, data, recorded_at)
            elif type_.startswith("memory.") and data is not None:
                self._memory(data, recorded_at)
            elif type_ == _RETAINED:
                self.retained = True
        s.position = max(s.position, s.high)

    def _run(self, run_id: str, version: int, type_: str, tv: int, key: str, data: Any,
             recorded_at: float) -> None:
        s = self.s
        mark = s.open_runs.get(run_id)
        if mark is None:
            if version != 1:
                return  # after its end (not written by gormes): the full scan judges it
            mark = s.open_runs[run_id] = RunMark()
            if type_ != "run.started":
                mark.reasons = [f"begins with {type_}, not run.started"]
        if not self.known(type_, tv):
            mark.unread[key] = mark.unread.get(key, 0) + 1
        if type_ == "run.started":
            value = _json(data) or {}
            mark.started = True
            mark.handler, mark.job_id = value.get("handler"), value.get("job_id")
            s.started += 1
            runs = s.handlers.setdefault(str(mark.handler), HandlerRuns())
            runs.runs += 1
            _remember_first(runs.first, run_id)
        elif type_ == _CUT:
            self._model_turn(run_id, _json(data) or {}, recorded_at, cut=True)
        elif type_ in _OBSERVED:
            mark.observations += 1
            value = _json(data) or {}
            if type_ == "run.llm_turn":
                self._model_turn(run_id, value, recorded_at, cut=False)
            seq = value.get("seq")
            if isinstance(seq, int) and seq > mark.top:
                mark.missing += range(mark.top + 1, seq)
                mark.top = seq
            elif isinstance(seq, int) and seq in mark.missing:
                mark.missing.remove(seq)
            elif isinstance(seq, int):
                mark.repeated = True
        if type_ in _ENDS:
            self._ended(run_id, mark)
            if type_ == "run.completed":
                if run_id in s.cited_early:
                    s.cited_early.remove(run_id)
                else:
                    s.awaiting[run_id] = recorded_at

    def _model_turn(self, run_id: str, value: dict[str, Any], recorded_at: float, *, cut: bool) -> None:
        usage = value.get("usage") if isinstance(value.get("usage"), dict) else {}
        tokens = sum(n for n in (usage.get("input"), usage.get("output")) if isinstance(n, int))
        day_key = day(recorded_at)
        days = self.s.model_days
        if day_key not in days:
            days[day_key] = ModelDay()
            for old in sorted(days)[:-MODEL_DAYS]:
                del days[old]
        found = days.get(day_key)
        if found is None:  # older than the days kept (a log folded out of order)
            return
        if cut:
            found.cut += 1
            found.cut_tokens += tokens
            if run_id not in found.cut_runs:
                _remember_first(found.cut_runs, run_id)
        else:
            found.turns += 1
            found.tokens += tokens

    def _ended(self, run_id: str, mark: RunMark) -> None:
        s = self.s
        del s.open_runs[run_id]
        if reasons := seq_reasons(mark):
            s.unreplayable[run_id] = reasons
        if mark.unread:
            s.unread_runs[run_id] = mark.unread

    def _memory(self, data: Any, recorded_at: float) -> None:
        value = _json(data)
        if not isinstance(value, dict):
            return
        extracted, run_id = _cited_run(value)
        if not extracted:
            return
        s = self.s
        s.last_extracted = recorded_at if s.last_extracted is None else max(s.last_extracted, recorded_at)
        if run_id is None:
            return
        if s.awaiting.pop(run_id, None) is None and run_id not in s.cited_early:
            s.cited_early.append(run_id)


def day(at: float) -> str:
    """The UTC day of `at` (seconds since the epoch), as the summary keys its days."""
    return time.strftime("%Y-%m-%d", time.gmtime(at))


def seq_reasons(mark: RunMark) -> list[str]:
    """The recorded reasons and the observation-seq reason of one run."""
    reasons = list(mark.reasons)
    n = mark.observations
    if n and (mark.missing or mark.repeated or mark.top != n):
        reasons.append(f"observation seq has gaps or repeats ({n} observations, highest seq {mark.top})")
    return reasons


def _rows_sql(conn: Any) -> str:
    marks = ", ".join(f"'{tag}'" for tag in _WITH_DATA)
    return (
        "SELECT position, stream, version, type, type_version, "
        f"CASE WHEN type IN ({marks}) OR type LIKE 'memory.%' THEN data END, recorded_at "
        "FROM events WHERE position > ? AND position <= ? ORDER BY position LIMIT ?"
    )


def fold_log(conn: Any, summary: LogSummary, known: Any) -> LogSummary:
    """`summary` brought up to the head of the log (on `conn`, read-only). A kept
    summary past the head (of another copy of the log), or one from before a
    retention deleted rows it counted (a `log.retained` after its position), is
    dropped and the whole log folded: the one kept is not this log's any more."""
    head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
    if summary.position > head:
        summary = LogSummary()
    folder, sql, after = Folder(summary, known), _rows_sql(conn), summary.position
    kept = after > 0
    while after < head:
        rows = conn.execute(sql, (after, head, PAGE)).fetchall()
        if not rows:
            break
        folder.fold(rows)
        after = rows[-1][0]
    if kept and folder.retained:
        return fold_log(conn, LogSummary(), known)
    summary.position = max(summary.position, head)
    return summary


# -- kept between runs (either backend: gormes/events/kept_fold.py) ------------------


def load(conn: Any) -> LogSummary | None:
    """The summary the last doctor run kept, or None (none, or unreadable)."""
    found = kept_fold.read(conn, TABLE, ROW)
    if found is None:
        return None
    try:
        return msgspec.json.decode(found[1], type=LogSummary)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def save(database: Path | str, summary: LogSummary) -> bool:
    """Keep `summary` for the next run (the SQLite file, or the PostgreSQL URL's
    schema), on a connection of its own; False when it could not be written at once."""
    return kept_fold.save_apart(database, TABLE, ROW, summary.position, msgspec.json.encode(summary).decode(),
                                application_name="gormes doctor")
