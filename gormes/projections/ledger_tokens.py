"""The ledger's token tables: what each job spent per model, what it wasted, and the totals.

Folded by the ledger (gormes/projections/ledger.py) from the job events, in the
same transaction, so a job's row and its token rows never disagree. Two tables:

    job_model_tokens(job_id, model, spent_*, wasted_*, ...)   one row per job and model
    model_tokens(model, spent_*, wasted_*)                    one row per model: the totals

where `*` is each kind of `Tokens` (input, output, cache_read, cache_write,
reasoning). Only a job's OWN tokens are here (`job.tokens_added` without
`from_child`): a child job's roll-up into its parent is the child's own row
already, so the totals count each token once, whatever the job tree. `model` is
the model whose turn the tokens were (`JobTokensAdded.model`); "" for tokens a
handler reported without one, or recorded before the model was kept (decision
0035): those have no price.

`spent` is everything the job's holders spent. `wasted` is the part spent by
attempts whose work was not kept: an attempt that failed and was retried
(`job.failed` to `delayed`), that stalled (`job.stalled`), that its worker gave
back (`job.released`: lease lost, shutdown) or that was paused while it ran
(`job.paused` of an active job), and a failed job's last attempt when an operator
retries the job (`job.retried`). An agent job's next attempt that RESUMES the run
of a stalled, released or paused attempt (its transcript entry names the run it
`resumes`, gormes/actors/agent_jobs/handler.py) serves that run's turns from the
log instead of redoing them: that attempt's waste is given back (and taken again
if the attempt then starts afresh, its resume refused).

Each row remembers the attempt its `attempt_*` counts belong to (`attempt`, the
job's `attempts_started` when they were added), so an attempt that ends well
costs no write: only tokens added and the rare ends above write here. The
totals are never decreased by a job's removal (`remove_on_complete`, `jobs
prune`): what was spent stays spent; a removed job's own rows are deleted.

`jobs stats` and `gormes top` price `model_tokens` (a row per model); `jobs get`
reads one job's rows. Everything is deterministic in the events, so a rebuild
gives the same rows. The SQL is one text for SQLite and PostgreSQL (`?`
placeholders, `ON CONFLICT` upserts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from gormes.events.base import Recorded
from gormes.events.jobs import (
    TOKEN_KINDS,
    JobFailed,
    JobPaused,
    JobReleased,
    JobRetried,
    JobStalled,
    JobTokensAdded,
    JobTranscribed,
    Tokens,
)

JOB_TABLE = "job_model_tokens"
TOTALS_TABLE = "model_tokens"
NO_MODEL = ""  # the `model` of tokens reported without one

# The agent job's transcript keys (gormes/actors/agent_jobs/attempts.py AGENT_RUN,
# and handler.py's "resumes"): a projection reads them as recorded, never imports them.
AGENT_RUN = "agent_run"
RESUMES = "resumes"


def _kinds(prefix: str) -> list[str]:
    return [f"{prefix}{kind}" for kind in TOKEN_KINDS]


SPENT, WASTED, ATTEMPT, CARRIED = (_kinds(p) for p in ("spent_", "wasted_", "attempt_", "carried_"))


def job_columns() -> dict[str, type]:
    """`job_model_tokens`: `attempt` the attempt the `attempt_*` counts belong to;
    `carried_*` the last wasted attempt's counts (given back if the next attempt
    resumes its run), from attempt `carried_attempt`, `refunded` 1 once given back."""
    columns: dict[str, type] = {"job_id": str, "model": str, "attempt": int}
    for name in (*SPENT, *WASTED, *ATTEMPT, *CARRIED):
        columns[name] = int
    columns["carried_attempt"] = int
    columns["refunded"] = int
    return columns


def totals_columns() -> dict[str, type]:
    columns: dict[str, type] = {"model": str}
    for name in (*SPENT, *WASTED):
        columns[name] = int
    return columns


def zero_defaults(columns: dict[str, type]) -> dict[str, int]:
    return {name: 0 for name, type_ in columns.items() if type_ is int and name not in ("carried_attempt",)}


# Folded beyond the jobs row's own UPDATE: the ledger's `executemany` runs leave
# these types out (so their rows are written here, in order).
FOLDED: frozenset[type] = frozenset({
    JobTokensAdded, JobFailed, JobStalled, JobReleased, JobPaused, JobRetried, JobTranscribed,
})

_ADD_JOB = (
    f"INSERT INTO {JOB_TABLE}(job_id, model, attempt, {', '.join(SPENT)}, {', '.join(ATTEMPT)})"
    f" SELECT id, ?, coalesce(attempts_started, 0), {', '.join('?' * 10)} FROM jobs WHERE id = ?"
    " ON CONFLICT(job_id, model) DO UPDATE SET "
    + ", ".join(f"{s} = {JOB_TABLE}.{s} + excluded.{s}" for s in SPENT)
    + ", "
    + ", ".join(
        f"{a} = CASE WHEN {JOB_TABLE}.attempt = excluded.attempt THEN {JOB_TABLE}.{a} + excluded.{a}"
        f" ELSE excluded.{a} END" for a in ATTEMPT
    )
    + ", attempt = excluded.attempt"
)
_ADD_TOTALS = (
    f"INSERT INTO {TOTALS_TABLE}(model, {', '.join(SPENT)})"
    f" SELECT ?, {', '.join('?' * 5)} FROM jobs WHERE id = ?"
    " ON CONFLICT(model) DO UPDATE SET "
    + ", ".join(f"{s} = {TOTALS_TABLE}.{s} + excluded.{s}" for s in SPENT)
)
_WASTE_TOTALS = (
    f"UPDATE {TOTALS_TABLE} SET " + ", ".join(f"{w} = {w} + ?" for w in WASTED) + " WHERE model = ?"
)


def _attempt_of(conn: Any, job_id: str) -> int | None:
    row = conn.execute("SELECT attempts_started FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return None if row is None else int(row[0] or 0)


def _rows(conn: Any, job_id: str, where: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    return conn.execute(
        f"SELECT model, {', '.join(ATTEMPT)}, {', '.join(CARRIED)} FROM {JOB_TABLE}"
        f" WHERE job_id = ? AND {where} ORDER BY model", (job_id, *params),
    ).fetchall()


def _waste(conn: Any, job_id: str) -> None:
    """The current attempt's tokens are wasted (its work is not kept)."""
    attempt = _attempt_of(conn, job_id)
    if attempt is None:
        return
    for model, *counts in _rows(conn, job_id, "attempt = ?", (attempt,)):
        used = [int(c or 0) for c in counts[:5]]
        if not any(used):
            continue
        conn.execute(
            f"UPDATE {JOB_TABLE} SET "
            + ", ".join(f"{w} = {w} + ?" for w in WASTED) + ", "
            + ", ".join(f"{c} = ?" for c in CARRIED) + ", "
            + ", ".join(f"{a} = 0" for a in ATTEMPT)
            + ", carried_attempt = ?, refunded = 0 WHERE job_id = ? AND model = ?",
            (*used, *used, attempt, job_id, model),
        )
        conn.execute(_WASTE_TOTALS, (*used, model))


def _give_back(conn: Any, job_id: str, sign: int, refunded: int) -> None:
    """The last wasted attempt's tokens (`sign` -1: given back, its run resumed;
    +1: taken again, the resume refused)."""
    attempt = _attempt_of(conn, job_id)
    if attempt is None:
        return
    for model, *counts in _rows(conn, job_id, "carried_attempt = ? AND refunded = ?", (attempt - 1, 1 - refunded)):
        carried = [sign * int(c or 0) for c in counts[5:]]
        if not any(carried):
            continue
        conn.execute(
            f"UPDATE {JOB_TABLE} SET " + ", ".join(f"{w} = {w} + ?" for w in WASTED)
            + ", refunded = ? WHERE job_id = ? AND model = ?",
            (*carried, refunded, job_id, model),
        )
        conn.execute(_WASTE_TOTALS, (*carried, model))


def _counts(tokens: Tokens) -> tuple[int, ...]:
    return tuple(getattr(tokens, kind) for kind in TOKEN_KINDS)


def _added_params(e: JobTokensAdded, job_id: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    model = e.model or NO_MODEL
    counts = _counts(e.tokens)
    return (model, *counts, *counts, job_id), (model, *counts, job_id)


def fold_added(conn: Any, recs: Sequence[Recorded]) -> None:
    """`fold` of a run of `job.tokens_added` events, in two `executemany`s: the same
    statements as `fold` runs for them one by one, each kind in their order
    (neither reads what the other writes, nor the jobs row's token columns)."""
    params = [_added_params(r.event, r.stream[4:]) for r in recs if r.event.from_child is None]
    if params:
        conn.executemany(_ADD_JOB, [p[0] for p in params])
        conn.executemany(_ADD_TOTALS, [p[1] for p in params])


def fold(conn: Any, rec: Recorded) -> None:
    """Fold one job event of a `FOLDED` type into the token tables. Called before the
    event's UPDATE of the jobs row (a pause reads the status it pauses)."""
    e = rec.event
    job_id = rec.stream[4:]
    if isinstance(e, JobTokensAdded):
        if e.from_child is not None:
            return
        add_job, add_totals = _added_params(e, job_id)
        conn.execute(_ADD_JOB, add_job)
        conn.execute(_ADD_TOTALS, add_totals)
    elif isinstance(e, JobFailed):
        if e.status == "delayed":
            _waste(conn, job_id)
    elif isinstance(e, (JobStalled, JobReleased, JobRetried)):
        _waste(conn, job_id)
    elif isinstance(e, JobPaused):
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is not None and row[0] == "active":
            _waste(conn, job_id)
    elif isinstance(e, JobTranscribed):
        data = e.entry.data
        if isinstance(data, dict) and AGENT_RUN in data:
            if data.get(RESUMES):
                _give_back(conn, job_id, -1, 1)
            else:
                _give_back(conn, job_id, +1, 0)


def delete_job(conn: Any, job_id: str) -> None:
    """A removed job's rows (the totals keep what it spent)."""
    conn.execute(f"DELETE FROM {JOB_TABLE} WHERE job_id = ?", (job_id,))


class ModelTokens(NamedTuple):
    """One model's row of either table, read."""

    model: str
    spent: Tokens
    wasted: Tokens


def _read(rows: Iterable[tuple[Any, ...]]) -> list[ModelTokens]:
    out = []
    for model, *counts in rows:
        values = [int(c or 0) for c in counts]  # PostgreSQL sums BIGINTs as numeric
        out.append(ModelTokens(
            model=model or NO_MODEL, spent=Tokens(**dict(zip(TOKEN_KINDS, values[:5], strict=True))),
            wasted=Tokens(**dict(zip(TOKEN_KINDS, values[5:], strict=True))),
        ))
    return out


def totals(conn: Any) -> list[ModelTokens]:
    """Every model's totals, by name (empty when the ledger has no token tables)."""
    return _read(conn.execute(
        f"SELECT model, {', '.join(SPENT)}, {', '.join(WASTED)} FROM {TOTALS_TABLE} ORDER BY model"
    ).fetchall())


def of_jobs(conn: Any, job_ids: Iterable[str]) -> dict[str, list[ModelTokens]]:
    """job id -> its rows, by model (jobs with none left out)."""
    found: dict[str, list[ModelTokens]] = {}
    ids = list(dict.fromkeys(job_ids))
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        rows = conn.execute(
            f"SELECT job_id, model, {', '.join(SPENT)}, {', '.join(WASTED)} FROM {JOB_TABLE}"
            f" WHERE job_id IN ({','.join('?' * len(chunk))}) ORDER BY job_id, model", chunk,
        ).fetchall()
        for job_id, *rest in rows:
            found.setdefault(job_id, []).extend(_read([tuple(rest)]))
    return found
