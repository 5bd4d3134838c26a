"""What runs cost: their model turns, priced when read (gormes/providers/pricing.py).

    costs = run_costs(conn, ["R1", "R2"], load_table())   # {"R1": 0.0123, "R2": None}

A run's cost is that of its own model turns (`run.llm_turn`, each
`run.llm_failed` that carries the usage of a reply the API billed, and each
`run.llm_cut`, a reply cut short while it streamed), as `gormes runs show`
lists them: a prefix it copied from another run (a fork, a resumed run) included,
its subagents' turns not (each is a run of its own). None when a turn's model has
no price, or a turn was redacted (its usage is gone); a run with no model turn has
no cost and is left out.

`live_turns` gives the turns a run made itself, without the copied prefix: what a
job's cost counts (gormes/actors/agent_jobs/costs.py), since the prefix's turns were
made, and counted, in the run it was copied from. A continuation's prefix is the
source's observations up to the position in `forked_from` / `resumed_from`, and a
run numbers its observations 1, 2, ... with the prefix first (continuation.py), so
the copied turns are those numbered up to the prefix's length.

Reads the `events` table by stream (indexed), in `?` SQL for SQLite or PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from gormes.events.jobs import TOKEN_KINDS, Tokens
from gormes.events.runs import OBSERVATION_TYPES, run_stream
from gormes.events.sql_fragments import json_number, json_text
from gormes.providers.pricing import PricingTable

CHUNK = 500  # streams per query: far below either database's limit on parameters
_OBSERVATION_TAGS = tuple(cls.__struct_config__.tag for cls in OBSERVATION_TYPES)


class Turn(NamedTuple):
    run_id: str
    seq: int
    model: str
    tokens: Tokens


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), CHUNK):
        yield unique[start:start + CHUNK]


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def turns(conn: Any, run_ids: Sequence[str]) -> list[Turn]:
    """Every model turn of these runs, in log order."""
    found: list[Turn] = []
    usage = [f"coalesce({json_number(conn, f'$.usage.{kind}')}, 0)" for kind in TOKEN_KINDS]
    # a turn recorded before `Tokens` had cache writes kept them beside its usage (`turn_usage`)
    usage.append(f"coalesce({json_number(conn, '$.cache_write')}, 0)")
    billed = json_number(conn, "$.usage.input")
    for chunk in _chunks(run_ids):
        streams = [run_stream(r) for r in chunk]
        rows = conn.execute(
            # a redacted turn (decision 0026) keeps its seq in its tombstone, and no model:
            # its usage is gone, so its run's cost is unknown (no price for model "")
            # a turn cut short (decision 0080) has no seq of its own: where it was cut stands in
            f"SELECT substr(stream, 5), coalesce({json_text(conn, '$.seq')}, {json_text(conn, '$.redacted.seq')},"
            f" {json_text(conn, '$.at_seq')}),"
            f" {json_text(conn, '$.model')},"
            f" {', '.join(usage)} FROM events WHERE stream IN ({_marks(streams)})"
            # a failed turn counts when the server billed it a reply (decision 0069)
            f" AND (type = 'run.llm_turn' OR (type IN ('run.llm_failed', 'run.llm_cut') AND {billed} IS NOT NULL))"
            " ORDER BY position", streams,
        ).fetchall()
        found += [  # int(): PostgreSQL gives the seq as text and the usage as numeric
            Turn(run_id, int(seq), model or "", Tokens(input=int(i), output=int(o), cache_read=int(c),
                                                       cache_write=max(int(w), int(old_w)), reasoning=int(r)))
            for run_id, seq, model, i, o, c, w, r, old_w in rows
        ]
    return found


def run_costs(conn: Any, run_ids: Sequence[str], table: PricingTable) -> dict[str, float | None]:
    """Each run's own cost (see the module doc); runs with no model turn left out."""
    by_run: dict[str, list[Turn]] = {}
    for turn in turns(conn, run_ids):
        by_run.setdefault(turn.run_id, []).append(turn)
    return {run_id: price(found, table) for run_id, found in by_run.items()}


def price(found: Iterable[Turn], table: PricingTable) -> float | None:
    return table.total((t.model, t.tokens) for t in found)


def copied_counts(conn: Any, run_ids: Sequence[str]) -> dict[str, int]:
    """How many observations each run that continues another copied from it (runs
    that continue none are left out)."""
    origins: list[tuple[str, str, int]] = []
    for chunk in _chunks(run_ids):
        streams = [run_stream(r) for r in chunk]
        rows = conn.execute(
            f"SELECT substr(stream, 5), {json_text(conn, '$.resumed_from.run_id')},"
            f" {json_text(conn, '$.resumed_from.position')}, {json_text(conn, '$.forked_from.run_id')},"
            f" {json_text(conn, '$.forked_from.position')} FROM events"
            f" WHERE stream IN ({_marks(streams)}) AND type = 'run.started'", streams,
        ).fetchall()
        for run_id, resumed, resumed_at, forked, forked_at in rows:
            if resumed is not None:
                origins.append((run_id, resumed, int(resumed_at)))
            elif forked is not None:
                origins.append((run_id, forked, int(forked_at)))
    tags = _marks(_OBSERVATION_TAGS)
    return {
        run_id: conn.execute(
            f"SELECT count(*) FROM events WHERE stream = ? AND position <= ? AND type IN ({tags})",
            (run_stream(origin), position, *_OBSERVATION_TAGS),
        ).fetchone()[0]
        for run_id, origin, position in origins
    }


def live_turns(conn: Any, run_ids: Sequence[str]) -> list[Turn]:
    """The model turns these runs made themselves: a copied prefix's left out."""
    copied = copied_counts(conn, run_ids)
    return [t for t in turns(conn, run_ids) if t.seq > copied.get(t.run_id, 0)]


def children(conn: Any, run_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(parent, child) for every subagent these runs spawned, in log order."""
    found: list[tuple[str, str]] = []
    for chunk in _chunks(run_ids):
        streams = [run_stream(r) for r in chunk]
        found += conn.execute(
            f"SELECT substr(stream, 5), {json_text(conn, '$.child_run_id')} FROM events"
            f" WHERE stream IN ({_marks(streams)}) AND type = 'run.child_spawned' ORDER BY position",
            streams,
        ).fetchall()
    return [(parent, child) for parent, child in found]
