"""Budgets: a model turn reserves its worst case before its request leaves, and
settles to what it used after (decision 0030).

    meter = BudgetMeter(store)
    async with meter.turn(run, request) as spend:      # reserve, or refuse
        reply = await provider.complete(request)
        spend.used(reply.usage)                        # settle (a raise: release, unless used)

A run is charged to the budgets named on its `run.started` (`budgets`): the one
it was started with, `job:<its job>`, `job:<each ancestor job>` (the job tree: the
`parent_id` chain in the ledger, any depth, so a child job's runs pay into the
budget of the job that submitted it), `scope:<its memory scope>` and
`trust:<its trust class>` (for a gateway's or an agent's run: `class_budget`) when those
exist (`applicable`); its subagents, resumes and forks carry the same ones, so
no child escapes its parent's budget. A run charged to none pays nothing here.

The reservation is one store transaction: it reads each budget's stream (from
where this process last folded it), decides (gormes/control/budget_rules.py) and
appends `budget.reserved` with the stream's expected version, on every budget or
on none. Transactions on one store are serialized (SQLite's one writer, the
PostgreSQL writer's table lock), so no two turns, in any task, process or host,
decide on the same state: the spent plus the held never passes a cap as long as
a turn uses no more than it held. Its output is held to that: the provider is
sent the smallest output its reservations held as `max_tokens` (`spend.output_ceiling`,
gormes/control/output_ceiling.py, decision 0065); its prompt is bounded by
`worst_case` with `bytes_per_token` 1.

At a cap, the budget's policy: `stop` raises `BudgetExceeded` (the run records it
as `run.llm_failed`, error_type BudgetExceeded, and replay raises the same);
`pause` parks the run's job on the budget in the refusal's transaction
(gormes/actors/jobs/parking.py: paused, its lease released), and the run waits
for room (the worker cancels it for the pause; the job's next attempt resumes the
run, decision 0011); a run of no job waits where it is. `budget raise` unparks
the jobs parked on the budget, in its own transaction.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import msgspec
import trio

from gormes.actors.jobs.parking import park_in
from gormes.actors.jobs.session import JobSession, new_id
from gormes.actors.jobs.state import JobError
from gormes.control.budget_rules import Ask, BudgetState, evolve, fold, refusal, reserve, worst_case
from gormes.control.output_ceiling import output_ceiling
from gormes.errors import UserError
from gormes.events.budgets import BudgetExhausted, BudgetReleased, BudgetSettled, budget_stream
from gormes.events.jobs import Tokens
from gormes.events.store import EventStore, Transaction
from gormes.projections.bookkeeping import has_table
from gormes.providers.base import ModelRequest, ProviderError, Usage
from gormes.providers.pricing import PricingTable, load_table

POLL_S = 1.0  # how often a paused turn looks for room


class BudgetExceeded(ProviderError):
    """A model turn refused before its request left: it would pass a budget's cap."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class UnknownBudget(UserError):
    """A budget id no `budget set` created."""


class Charged(Protocol):
    """What a turn's run says about itself (gormes/actors/runs/manager.py `LiveRun`)."""

    run_id: str
    job_id: str | None
    budgets: tuple[str, ...]


class Spend:
    """A turn's place in its budgets; `used(usage)` is what it settles to.
    `output_ceiling`: the most output its reservations held (None: charged to no
    budget), what the provider is sent as `max_tokens` (output_ceiling.py)."""

    __slots__ = ("output_ceiling", "usage")

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.output_ceiling: int | None = None

    def used(self, usage: Usage) -> None:
        self.usage = usage


def tokens_of(usage: Usage) -> Tokens:
    """A reply's usage as the counts `Tokens` keeps (every kind it has)."""
    return msgspec.convert(usage, Tokens, from_attributes=True)


def scope_budget(scope: str) -> str:
    return f"scope:{scope}"


def job_budget(job_id: str) -> str:
    return f"job:{job_id}"


# The trust classes a budget may cap as a whole (`trust:<class>`): those whose
# runs others start, and whose names (a gateway's scope) they choose.
CLASS_BUDGETED = ("gateway", "child-agent")


def class_budget(trust: str) -> str | None:
    return f"trust:{trust}" if trust in CLASS_BUDGETED else None


MAX_TREE_DEPTH = 1000  # ancestors looked up at most (a bound on a chain, never reached)

# The job's ancestors, nearest first: the ledger's parent_id chain (primary-key
# lookups, one statement; SQLite and PostgreSQL both speak WITH RECURSIVE).
_ANCESTORS = (
    "WITH RECURSIVE up(id, parent_id, n) AS ("
    " SELECT id, parent_id, 0 FROM jobs WHERE id = ?"
    " UNION ALL SELECT j.id, j.parent_id, up.n + 1 FROM jobs j JOIN up ON j.id = up.parent_id"
    " WHERE up.n < ?) SELECT id FROM up WHERE n > 0 ORDER BY n"
)


def job_ancestors(conn: Any, job_id: str) -> list[str]:
    """The jobs above `job_id` in its tree, nearest first (none without a ledger)."""
    if not has_table(conn, "jobs"):
        return []
    return [row[0] for row in conn.execute(_ANCESTORS, (job_id, MAX_TREE_DEPTH)).fetchall()]


async def applicable(store: EventStore, budget: str | None, *, job_id: str | None,
                     scope: str | None, job_has_parent: bool = True, trust: str | None = None) -> tuple[str, ...]:
    """The budgets a top-level run is charged to: `budget` (which must exist), and
    `job:<job_id>`, `job:<ancestor>` for each job above it in its tree,
    `scope:<scope>` and `trust:<its trust class>` (a gateway's or an agent's:
    CLASS_BUDGETED) if they do. One read; none for a run with neither a budget, a
    job, a scope nor such a class. `job_has_parent` False (the caller knows the job
    is a tree's top): its ancestors are not looked up, and the read is one query."""
    whole_class = class_budget(trust) if trust is not None else None
    if budget is None and job_id is None and scope is None and whole_class is None:
        return ()

    def look(log: Any) -> tuple[list[str], list[int]]:
        above = job_ancestors(log.sql, job_id) if job_id and job_has_parent else []
        jobs = [job_id, *above] if job_id else []
        names = list(dict.fromkeys(n for n in (budget, *map(job_budget, jobs),
                                               scope_budget(scope) if scope else None, whole_class)
                                   if n is not None))
        streams = [budget_stream(n) for n in names]
        versions = log.stream_versions(streams)
        return names, [versions[s] for s in streams]

    names, versions = await store.read_point(look)
    if budget is not None and versions[0] == 0:
        raise UnknownBudget(f"unknown budget {budget!r}: create it with `gormes budget set {budget} ...`")
    return tuple(n for n, v in zip(names, versions, strict=True) if v)


class _Refused(msgspec.Struct, frozen=True):
    reasons: tuple[str, ...]
    stop: bool  # a refusing budget's policy is stop


class BudgetMeter:
    """The budgets of every model turn a RunManager drives (gormes/actors/runs/live.py
    `llm`). It keeps each budget's state as last folded, to read only what is newer."""

    def __init__(
        self, store: EventStore, *, clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep, poll_s: float = POLL_S,
        pricing: PricingTable | None = None, ids: Callable[[], str] = new_id,
    ) -> None:
        self.store = store
        self.clock = clock
        self._sleep = sleep
        self.poll_s = poll_s
        self._pricing = pricing
        self._ids = ids
        self._states: dict[str, BudgetState] = {}

    @property
    def pricing(self) -> PricingTable:
        if self._pricing is None:
            self._pricing = load_table()
        return self._pricing

    # -- a turn ------------------------------------------------------------------------

    @asynccontextmanager
    async def turn(self, run: Charged, request: ModelRequest) -> AsyncIterator[Spend]:
        """Reserve (or refuse, or wait for room), run the block (the request), then
        settle to what `spend.used` was given, even when the block then raises (a
        reply the API billed and gormes could not use: decision 0069); release when
        it gives nothing. A run charged to no budget goes at once."""
        spend = Spend()
        budgets = run.budgets
        if not budgets:
            yield spend
            return
        hold_id, spend.output_ceiling = await self._reserve(budgets, run.run_id, run.job_id, request)
        try:
            yield spend
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await self._settle(budgets, hold_id, spend.usage, type(exc).__name__)
            raise
        with trio.CancelScope(shield=True):
            await self._settle(budgets, hold_id, spend.usage, "no usage reported")

    async def _reserve(self, budgets: tuple[str, ...], run_id: str, job_id: str | None,
                       request: ModelRequest) -> tuple[str, int]:
        """The hold's id and the turn's output ceiling."""
        hold_id = self._ids()
        decided = await self._try(budgets, hold_id, run_id, job_id, request, record=True)
        while isinstance(decided, _Refused):
            if decided.stop:
                raise BudgetExceeded("; ".join(decided.reasons))
            await self._sleep(self.poll_s)  # paused: a raise (or a settle) makes room
            if await self._has_room(budgets, request):
                decided = await self._try(budgets, hold_id, run_id, job_id, request, record=False)
        return hold_id, decided

    def _load(self, tx: Transaction, budget_id: str) -> BudgetState:
        known = self._states.get(budget_id) or BudgetState(budget_id=budget_id)
        records = tx.read_stream(budget_stream(budget_id), known.version)
        return fold(budget_id, [r.event for r in records], known)

    def _remember(self, states: Sequence[BudgetState]) -> None:
        for state in states:
            known = self._states.get(state.budget_id)
            if known is None or known.version < state.version:
                self._states[state.budget_id] = state

    async def _try(self, budgets: tuple[str, ...], hold_id: str, run_id: str, job_id: str | None,
                   request: ModelRequest, *, record: bool) -> _Refused | int:
        """Reserve on every budget (the output ceiling of what they held) or on none."""
        table, now = self.pricing, int(self.clock() * 1000)

        def decide(tx: Transaction) -> tuple[_Refused | int, list[BudgetState]]:
            states = [self._load(tx, b) for b in budgets]
            asks = [Ask(hold_id=hold_id, run_id=run_id, job_id=job_id, model=request.model,
                        tokens=worst_case(s, request), now=now) for s in states]
            decisions = [reserve(s, a, table) for s, a in zip(states, asks, strict=True)]
            refused = [(s, d) for s, d in zip(states, decisions, strict=True) if isinstance(d, BudgetExhausted)]
            if not refused:
                after = [_append(tx, s, d) for s, d in zip(states, decisions, strict=True)]
                return output_ceiling(d.tokens for d in decisions), after
            stop = any(d.policy == "stop" for _, d in refused)
            after = []
            if record:
                first = refused[0]
                paused = not stop and job_id is not None and _park_job(tx, job_id, now, first[0].budget_id,
                                                                       first[1].reason)
                after = [_append(tx, s, msgspec.structs.replace(d, job_paused=paused and s is first[0]))
                         for s, d in refused]
            return _Refused(tuple(d.reason for _, d in refused), stop), after

        result, states = await self.store.transact(decide)
        self._remember(states)
        return result

    async def _has_room(self, budgets: tuple[str, ...], request: ModelRequest) -> bool:
        """Whether the turn would fit now (a read; the reservation decides again)."""
        table, now = self.pricing, int(self.clock() * 1000)
        streams = await self.store.read_with(lambda log: {
            b: log.read_stream(budget_stream(b), self._states.get(b, BudgetState()).version) for b in budgets})
        for b in budgets:
            known = self._states.get(b) or BudgetState(budget_id=b)
            state = fold(b, [r.event for r in streams[b]], known)
            self._remember([state])
            ask = Ask(hold_id="", run_id="", job_id=None, model=request.model, tokens=worst_case(state, request),
                      now=now)
            if refusal(state, ask, table) is not None:
                return False
        return True

    async def _settle(self, budgets: tuple[str, ...], hold_id: str, usage: Usage | None, why: str) -> None:
        now = int(self.clock() * 1000)
        used = tokens_of(usage) if usage is not None else None

        def write(tx: Transaction) -> list[BudgetState]:
            after = []
            for b in budgets:
                state = self._load(tx, b)
                if hold_id not in state.holds:
                    continue
                event: Any = (BudgetSettled(hold_id=hold_id, used=used, at=now) if used is not None
                              else BudgetReleased(hold_id=hold_id, reason=why, at=now))
                after.append(_append(tx, state, event))
            return after

        self._remember(await self.store.transact(write))


def _append(tx: Transaction, state: BudgetState, event: Any) -> BudgetState:
    tx.append(budget_stream(state.budget_id), [event], state.version)
    return evolve(state, event)


def _park_job(tx: Transaction, job_id: str, now: int, budget_id: str, why: str) -> bool:
    """Park the run's job on the budget in this transaction (gormes/actors/jobs/parking.py:
    paused, lease released, resumed by a raise); False if it is not active (nothing written).
    The holder is the job's current lease: the run is its attempt's."""
    job = JobSession(tx, now).state(job_id)
    if job is None or job.status != "active" or job.lock_token is None:
        return False
    try:
        park_in(tx, now, job_id, job.lock_token, on=budget_stream(budget_id), why=why)
    except (JobError, UserError):
        return False
    return True
