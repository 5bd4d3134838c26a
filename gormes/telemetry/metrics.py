"""Prometheus metrics read from the log, the ledger and the projections at scrape time.

Nothing is instrumented on a hot path: a scrape asks the daemon's trio loop
(`trio.from_thread.run`, from the HTTP server's thread) to read, through the
store's read connection, on either backend:

- the job ledger: jobs by queue and status, claim latency (a histogram over the
  ledger's jobs: from when a job could first run, its creation or its delay's end,
  to its latest claim), breaker trips (jobs the memory breaker killed);
- the log, incrementally (only the rows after the last scrape, read by position):
  attempts (`job.claimed`), stalls (`job.stalled`), and tokens and cost by model
  (`run.llm_turn`, `run.llm_failed` with the usage of a reply the API billed, and
  `run.llm_cut`, a reply cut short while it streamed;
  a continuation's copied prefix counted once, in the run it was made in; cost
  priced with the pricing table, unpriced models left out). The fold's position
  and counters are kept in the database (`metrics_fold`, gormes/events/kept_fold.py,
  decision 0084; `keep`, every KEEP_EVERY_S by the daemon and when it stops) and
  taken up when a daemon starts, so its first scrape reads what was appended
  since, not the whole log;
- the gateways' calls the call rate refused, from the index the database keeps of
  them (`events_call_refused`), only those recorded since the last scrape
  (gormes/telemetry/refusal_count.py, decision 0079);
- `tracking`: each follower's lag behind the head (projections, the trace follower);
- the log's size (events, and bytes on SQLite);
- the daemon's workers, in memory: their limit, active jobs and the governor's
  load and thresholds.

Names, labels and meanings are listed in docs/observe.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec
import trio
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from gormes.projections.ledger import BREAKER_KILLED
from gormes.actors.runs.costs import copied_counts
from gormes.errors import GormesError
from gormes.events import kept_fold
from gormes.events.jobs import Tokens
from gormes.events.sql_fragments import json_number, json_text
from gormes.events.store import EventStore
from gormes.providers.pricing import PricingTable, load_table
from gormes.telemetry.gauges import WorkerGauge
from gormes.telemetry.refusal_count import RefusalCount

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# a failed turn adds the tokens of a reply the API billed, if it carries them (decision 0069)
# and a turn cut short while it streamed bills what its stream reported (decision 0080)
_MODEL_TYPES = ("run.llm_turn", "run.llm_failed", "run.llm_cut")
_FOLD_TYPES = (*_MODEL_TYPES, "job.claimed", "job.stalled")
_FOLD_PAGE = 5000
KEEP_TABLE, KEEP_ROW = "metrics_fold", "counters"
# A write a minute at most (only when the fold moved): a daemon stopped without
# warning folds again at most what the log took in its last minute.
KEEP_EVERY_S = 60.0

log = logging.getLogger("gormes.telemetry")


class _ByModel(msgspec.Struct, kw_only=True):
    tokens: Tokens = Tokens()
    cost: float = 0.0
    turns: int = 0


class FoldState(msgspec.Struct, kw_only=True):
    """The counters folded from the log up to `position`, as kept between daemons;
    `pricing`: the version of the pricing table the costs were priced with (a
    state priced with another table is not taken up: its costs would mix two)."""

    position: int = 0
    attempts: int = 0
    stalls: int = 0
    by_model: dict[str, _ByModel] = {}
    pricing: str = ""


class Snapshot(msgspec.Struct, kw_only=True):
    jobs: list[tuple[str, str, int]]  # queue, status, count
    latency: list[tuple[str, list[int], int, float]]  # queue, cumulative bucket counts, count, sum
    breaker_trips: int
    lag: dict[str, int]
    events: int
    log_bytes: int | None
    attempts: int
    stalls: int
    by_model: dict[str, _ByModel]
    workers: list[WorkerGauge]
    gateway_refusals: int | None = None  # None: not counted (no index, and calls are limited)
    gateway_refusals_since: float | None = None  # when the count began (seconds since the epoch)


class LogMetrics(Collector):
    """A custom collector: each `collect` reads a fresh `Snapshot` from the store."""

    def __init__(self, store: EventStore, *, workers: Callable[[], Sequence[WorkerGauge]] = list,
                 pricing: PricingTable | None = None, timeout_s: float = 10.0) -> None:
        self.store = store
        self.workers = workers
        self.pricing = pricing or load_table()
        self.timeout_s = timeout_s
        self.token = trio.lowlevel.current_trio_token()
        self._lock = trio.Lock()
        self._folded = 0  # log position the counters have folded
        self._attempts = 0
        self._stalls = 0
        self._by_model: dict[str, _ByModel] = {}
        self._copied: dict[str, int] = {}
        self._refusals = RefusalCount()
        self._resumed = False  # the kept state was looked for
        self._kept = 0  # the position of the state kept last (by this collector or the one it took up)

    async def prepare(self) -> None:
        """Take up the counters kept in the database, and begin the counts that
        start with the daemon (the gateways' refusals) at the log's head now."""
        async with self._lock:
            await self._resume()
        await self._refusals.begin(self.store)

    async def _resume(self) -> None:
        """The kept fold's state, once (before the first fold), unless it is unreadable,
        past the log's head (another copy of the log's), or priced with another table."""
        if self._resumed:
            return
        self._resumed = True
        try:
            found, head = await self.store.read_sql(lambda conn: (kept_fold.read(conn, KEEP_TABLE, KEEP_ROW),
                                                                  _head(conn)))
            state = None if found is None else msgspec.json.decode(found[1], type=FoldState)
        except (GormesError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.debug("metrics: the kept counters cannot be read (%s): folding from the start", exc)
            return
        if state is None or state.position > head or state.pricing != self.pricing.version:
            return
        self._folded = self._kept = state.position
        self._attempts, self._stalls, self._by_model = state.attempts, state.stalls, state.by_model

    async def keep(self) -> bool:
        """Keep the counters in the database if the fold moved since they were kept
        last; False when nothing was written (nothing new, or it cannot be written:
        a read-only store, a role that may not write the table; the next start folds more)."""
        async with self._lock:
            if not self._resumed or self._folded <= self._kept:
                return False
            state = FoldState(position=self._folded, attempts=self._attempts, stalls=self._stalls,
                              by_model={k: _ByModel(tokens=v.tokens, cost=v.cost, turns=v.turns)
                                        for k, v in self._by_model.items()},
                              pricing=self.pricing.version)
        text = msgspec.json.encode(state).decode()
        try:
            await self.store.transact(lambda tx: kept_fold.write(tx, KEEP_TABLE, KEEP_ROW, state.position, text))
        except GormesError as exc:
            log.debug("metrics: the counters cannot be kept (%s)", exc)
            return False
        self._kept = max(self._kept, state.position)
        return True

    async def snapshot(self) -> Snapshot:
        async with self._lock:  # two scrapes at once must not fold the same rows twice
            with trio.fail_after(self.timeout_s):
                await self._fold()
                await self._refusals.fold(self.store)
                read = await self.store.read_sql(_read_ledger)
        jobs, latency, trips, lag, events, size = read
        return Snapshot(jobs=jobs, latency=latency, breaker_trips=trips, lag=lag, events=events,
                        log_bytes=size, attempts=self._attempts, stalls=self._stalls,
                        by_model={k: _ByModel(tokens=v.tokens, cost=v.cost, turns=v.turns)
                                  for k, v in self._by_model.items()},
                        workers=list(self.workers()),
                        gateway_refusals=self._refusals.total if self._refusals.known else None,
                        gateway_refusals_since=self._refusals.started_at)

    @property
    def folded(self) -> int:
        """The log position the counters have folded up to."""
        return self._folded

    async def _fold(self) -> None:
        await self._resume()
        while True:
            rows, head = await self.store.read_sql(lambda conn: _fold_rows(conn, self._folded))
            if not rows:
                self._folded = max(self._folded, head)  # none of the rows up to the head is one to count
                return
            fresh = sorted({r[1][4:] for r in rows if r[2] in _MODEL_TYPES} - set(self._copied))
            if fresh:
                found = await self.store.read_sql(lambda conn: copied_counts(conn, fresh))
                self._copied.update({run_id: found.get(run_id, 0) for run_id in fresh})
            for position, stream, kind, seq, model, i, o, c in rows:
                if kind == "job.claimed":
                    self._attempts += 1
                elif kind == "job.stalled":
                    self._stalls += 1
                elif (kind == "run.llm_turn" or i is not None) and int(seq or 0) > self._copied.get(stream[4:], 0):
                    # a failed turn counts only with the usage of a reply the API billed
                    tokens = Tokens(input=int(i or 0), output=int(o or 0), cache_read=int(c or 0))
                    entry = self._by_model.setdefault(model or "", _ByModel())
                    entry.tokens = entry.tokens + tokens
                    entry.turns += 1 if kind == "run.llm_turn" else 0
                    entry.cost += self.pricing.cost(model or "", tokens) or 0.0
                self._folded = position
            if len(rows) < _FOLD_PAGE:
                self._folded = max(self._folded, head)
                return

    def collect(self) -> Iterator[Any]:
        try:
            snap = trio.from_thread.run(self.snapshot, trio_token=self.token)
        except trio.RunFinishedError:
            return
        yield from families(snap)


def _fold_rows(conn: Any, after: int) -> tuple[list[tuple[Any, ...]], int]:
    """The rows to count after `after` up to the head, a page at most, and that head:
    a scrape moves on to it even when none of the rows is one to count, or the next
    would read them all again (on SQLite, which has no index of `type`, every row
    since the last one counted)."""
    # the head first: every row up to it is committed (each is appended at the head + 1)
    head = _head(conn)
    usage = [json_number(conn, f"$.usage.{k}") for k in ("input", "output", "cache_read")]
    marks = ",".join("?" * len(_FOLD_TYPES))
    rows = conn.execute(
        f"SELECT position, stream, type, coalesce({json_text(conn, '$.seq')}, {json_text(conn, '$.at_seq')}),"
        f" {json_text(conn, '$.model')},"
        f" {', '.join(usage)} FROM events WHERE position > ? AND position <= ? AND type IN ({marks})"
        f" ORDER BY position LIMIT {_FOLD_PAGE}", (after, head, *_FOLD_TYPES),
    ).fetchall()
    return rows, head


def _head(conn: Any) -> int:
    return int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])


def _read_ledger(conn: Any) -> tuple[Any, ...]:
    jobs = [(q, s, int(n)) for q, s, n in conn.execute(
        "SELECT queue, status, count(*) FROM jobs GROUP BY queue, status ORDER BY queue, status")]
    # ms from when a job could first run to its latest claim
    ready = "CASE WHEN delay_until IS NOT NULL AND delay_until > created_at AND delay_until <= claimed_at" \
            " THEN delay_until ELSE created_at END"
    cases = ", ".join(f"sum(CASE WHEN claimed_at - ({ready}) <= {int(b * 1000)} THEN 1 ELSE 0 END)"
                      for b in LATENCY_BUCKETS_S)
    latency = []
    for row in conn.execute(
        f"SELECT queue, count(*), coalesce(sum(claimed_at - ({ready})), 0), {cases} FROM jobs"
        " WHERE claimed_at IS NOT NULL GROUP BY queue ORDER BY queue"
    ):
        queue, count, total_ms, *buckets = row
        latency.append((queue, [int(b or 0) for b in buckets], int(count), int(total_ms) / 1000))
    trips = int(conn.execute(f"SELECT count(*) FROM jobs WHERE {BREAKER_KILLED} AND status = 'dead'").fetchone()[0])
    head = int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])
    lag = {name: head - int(position) for name, position in
           conn.execute("SELECT projection, position FROM tracking ORDER BY projection")}
    size = None
    if type(conn).__module__ == "sqlite3":
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0])
    return jobs, latency, trips, lag, head, size


def families(snap: Snapshot) -> Iterator[Any]:
    """The metric families of one snapshot (names in docs/observe.md)."""
    jobs = GaugeMetricFamily("gormes_jobs", "Jobs in the ledger by queue and status.",
                             labels=["queue", "status"])
    for queue, status, n in snap.jobs:
        jobs.add_metric([queue, status], n)
    yield jobs
    latency = HistogramMetricFamily(
        "gormes_job_claim_latency_seconds",
        "Time from when a job could first run (creation or the end of its delay) to its latest claim.",
        labels=["queue"])
    for queue, cumulative, count, total in snap.latency:
        buckets = [(_le(b), n) for b, n in zip(LATENCY_BUCKETS_S, cumulative)] + [("+Inf", count)]
        latency.add_metric([queue], buckets, total)
    yield latency
    yield CounterMetricFamily("gormes_job_attempts", "Job attempts started (job.claimed events).",
                              value=snap.attempts)
    yield CounterMetricFamily("gormes_job_stalls", "Job leases that expired (job.stalled events).",
                              value=snap.stalls)
    yield CounterMetricFamily("gormes_governor_breaker_trips",
                              "Jobs the memory circuit breaker killed.", value=snap.breaker_trips)
    tokens = CounterMetricFamily("gormes_model_tokens", "Model tokens by model and kind.",
                                 labels=["model", "kind"])
    turns = CounterMetricFamily("gormes_model_turns", "Model turns by model.", labels=["model"])
    cost = CounterMetricFamily("gormes_model_cost_dollars", "What the model turns cost (priced models).",
                               labels=["model"])
    for model, entry in sorted(snap.by_model.items()):
        for kind in ("input", "output", "cache_read"):
            tokens.add_metric([model, kind], getattr(entry.tokens, kind))
        turns.add_metric([model], entry.turns)
        cost.add_metric([model], entry.cost)
    yield from (tokens, turns, cost)
    if snap.gateway_refusals is not None:
        yield CounterMetricFamily(
            "gormes_gateway_call_rate_refusals",
            "Gateway calls the call rate refused (GORMES_GATEWAY_RATE, or a client's share of it:"
            " GORMES_GATEWAY_CLIENT_RATE), recorded since the daemon started.",
            value=snap.gateway_refusals, created=snap.gateway_refusals_since)
    lag = GaugeMetricFamily("gormes_projection_lag_events",
                            "Events between the log's head and where a follower has applied.",
                            labels=["projection"])
    for name, behind in sorted(snap.lag.items()):
        lag.add_metric([name], behind)
    yield lag
    yield GaugeMetricFamily("gormes_log_events", "Events in the log (its head position).", value=snap.events)
    if snap.log_bytes is not None:
        yield GaugeMetricFamily("gormes_log_bytes", "Size of the SQLite database file.", value=snap.log_bytes)
    yield from _worker_families(snap.workers)


def _worker_families(workers: Sequence[WorkerGauge]) -> Iterator[Any]:
    limit = GaugeMetricFamily("gormes_worker_limit", "Jobs a worker may run at once now (the governor's limit).",
                              labels=["worker"])
    active = GaugeMetricFamily("gormes_worker_active_jobs", "Jobs a worker is running.", labels=["worker"])
    load = GaugeMetricFamily("gormes_governor_load_percent", "The load the governor last sampled.",
                             labels=["worker", "resource"])
    bounds = GaugeMetricFamily("gormes_governor_bound", "The governor's floor and ceiling.",
                               labels=["worker", "bound"])
    for w in workers:
        limit.add_metric([w.worker_id], w.limit)
        active.add_metric([w.worker_id], w.active)
        report = w.governor or {}
        for resource in ("cpu", "memory"):
            value = report.get(f"{resource}_percent")
            if value is not None:
                load.add_metric([w.worker_id, resource], value)
        for bound in ("floor", "ceiling"):
            if bound in report:
                bounds.add_metric([w.worker_id, bound], report[bound])
    yield from (limit, active, load, bounds)


def _le(bound: float) -> str:
    return repr(float(bound))


class MetricsPortUnavailable(GormesError):
    """The metrics port cannot be bound (taken by another process, or not ours to take)."""


class MetricsServer:
    """`/metrics` on a loopback port, served from a thread by prometheus-client."""

    def __init__(self, collector: LogMetrics, port: int, addr: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            raise MetricsPortUnavailable(
                f"metrics port {addr}:{port}: {exc.strerror or exc} (choose another with --metrics-port)"
            ) from None
        self.port = int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

