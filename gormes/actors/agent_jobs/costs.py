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

Reads the `events` table by stream (indexed) and the job ledger's ids, in `?` SQL
for SQLite or PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gormes.actors.agent_jobs.attempts import AGENT_RUN
from gormes.actors.runs.costs import CHUNK, Turn, children, live_turns, price
from gormes.events.jobs import job_stream
from gormes.events.sql_fragments import json_text
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


def ledger_cost(conn: Any, table: PricingTable) -> float | None:
    """What every job in the ledger cost together (`gormes jobs stats`): the sum of
    the jobs' costs, in id order (0.0 when no job ran a model turn); None if one of
    them is unknown."""
    ids = [row[0] for row in conn.execute("SELECT id FROM jobs ORDER BY id").fetchall()]
    costs = job_costs(conn, ids, table)
    if any(c is None for c in costs.values()):
        return None
    return sum((costs[j] or 0.0 for j in sorted(costs)), 0.0)
