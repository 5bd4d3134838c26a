"""What jobs cost: the model turns of the runs their attempts drove, priced when read.

    costs = job_costs(conn, ["J1", "J2"], load_table())   # {"J1": 0.0123}

A job's runs are the ones its attempts named in its log (`attempts.AGENT_RUN`) and,
under them, every subagent those spawned: the runs whose tokens the job was given
(tokens.py). Each model turn counts once, where it was made: a run that continues
another (an attempt resuming the last one's run, a resumed subagent) starts with a
copy of that run's turns, which are left out (`gormes.actors.runs.costs.live_turns`).
So a job's cost is the price of its runs' tokens, priced per model
(gormes/providers/pricing.py). It is None when a turn's model has no price. A job
that ran no model turn has no cost and is left out: one whose handler reports tokens
itself (`ctx.tokens`) has tokens without a model to price them by. A child job's
cost is the child's own, not added to its parent's.

What the jobs spent TOGETHER (`ledger_costs`: `gormes jobs stats`, `gormes top`)
is priced from the ledger's per-model totals instead (gormes/projections/
ledger_tokens.py), a handful of rows whatever the size of the log: every job's
own tokens, as its runs reported them with their model, and the part wasted by
attempts whose work was not kept. A job's spent and wasted tokens per model are
its rows there (`job_spending`, `gormes jobs get`).

Reads the `events` table by stream (indexed) and the job ledger, in `?` SQL for
SQLite or PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from gormes.actors.agent_jobs.attempts import AGENT_RUN
from gormes.actors.runs.costs import CHUNK, Turn, children, live_turns, price
from gormes.events.jobs import Tokens, job_stream
from gormes.events.sql_fragments import json_text
from gormes.projections import ledger_tokens
from gormes.projections.ledger_tokens import NO_MODEL, ModelTokens
from gormes.providers.pricing import PricingTable


def job_runs(conn: Any, job_ids: Sequence[str]) -> dict[str, str]:
    """run id -> job id, for every run of these jobs (attempts and their subagents)."""
    unique = list(dict.fromkeys(job_ids))
    named = json_text(conn, f"$.entry.data.{AGENT_RUN}")
    owner: dict[str, str] = {}
    for start in range(0, len(unique), CHUNK):
        streams = [job_stream(j) for j in unique[start:start + CHUNK]]
        for job_id, run_id in conn.execute(
            f"SELECT substr(stream, 5), {named} FROM events WHERE stream IN ({','.join('?' * len(streams))})"
            f" AND type = 'job.transcribed' AND {named} IS NOT NULL ORDER BY position", streams,
        ).fetchall():
            owner.setdefault(str(run_id), job_id)
    frontier = list(owner)
    while frontier:  # down the subagent tree, one level per round
        spawned = [(parent, child) for parent, child in children(conn, frontier) if child not in owner]
        for parent, child in spawned:
            owner[child] = owner[parent]
        frontier = [child for _, child in spawned]
    return owner


def job_costs(conn: Any, job_ids: Sequence[str], table: PricingTable) -> dict[str, float | None]:
    """Each job's cost (see the module doc); jobs with no model turn left out."""
    owner = job_runs(conn, job_ids)
    by_job: dict[str, list[Turn]] = {}
    for turn in live_turns(conn, list(owner)):
        by_job.setdefault(owner[turn.run_id], []).append(turn)
    return {job_id: price(found, table) for job_id, found in by_job.items()}


class LedgerCost(msgspec.Struct, frozen=True, kw_only=True):
    """What the jobs of the ledger spent together, priced (`gormes jobs stats`, `top`).

    `cost`: the price of every job's own tokens, per model (None when a model has no
    price; 0.0 when none ran a model turn); `wasted_cost` the part of it spent by
    attempts whose work was not kept (gormes/projections/ledger_tokens.py);
    `unpriced` the tokens with no model to price them by (a handler's own report, or
    recorded before the model was kept); `pricing` the table's version."""

    cost: float | None
    wasted_cost: float | None
    spent: Tokens
    wasted: Tokens
    unpriced: Tokens
    pricing: str


def price_rows(rows: Iterable[ModelTokens], table: PricingTable) -> LedgerCost:
    """Rows of per-model tokens (one job's, or the totals), priced per model."""
    rows = list(rows)
    priced = [r for r in rows if r.model != NO_MODEL]
    unpriced = sum((r.spent for r in rows if r.model == NO_MODEL), Tokens())
    return LedgerCost(
        cost=table.total((r.model, r.spent) for r in priced),
        wasted_cost=table.total((r.model, r.wasted) for r in priced),
        spent=sum((r.spent for r in rows), Tokens()), wasted=sum((r.wasted for r in rows), Tokens()),
        unpriced=unpriced, pricing=table.version,
    )


def ledger_costs(conn: Any, table: PricingTable) -> LedgerCost:
    """What every job spent together (see `LedgerCost`): the ledger's per-model totals
    priced, a row per model whatever the number of jobs."""
    return price_rows(ledger_tokens.totals(conn), table)


def ledger_cost(conn: Any, table: PricingTable) -> float | None:
    """`ledger_costs(...).cost`: what every job's own model turns cost together."""
    return ledger_costs(conn, table).cost


def job_spending(conn: Any, job_ids: Sequence[str], table: PricingTable) -> dict[str, LedgerCost]:
    """Each job's own tokens, spent and wasted, priced per model (jobs that were
    given no tokens left out)."""
    return {job_id: price_rows(rows, table) for job_id, rows in ledger_tokens.of_jobs(conn, job_ids).items()}
