"""Provider rate limits shared by every worker on every host, through the store.

A model turn takes a rate lease before its request leaves: one request and its
estimated tokens, per limit key (`openai:gpt-4o-mini`), in a sliding window.
Leases are rows (gormes/control/limits_table.py), checked and taken in one store
transaction, so ten workers share one quota instead of sending ten times it.
When there is no room the turn sleeps until the lease in the way frees it, then
asks again. After the reply the lease is settled: it counts from the moment the
request ended (when it left is not known: a provider may open its client or
import its SDK first, seconds for the first request of a process), for one
window, with the tokens the provider reported; until then (in flight) it counts
whatever its age. So a lease counts from before its request left until a window
after it surely had: any two requests sent less than a window apart saw each
other's lease when the later one was let through, and no window of W seconds
holds more than N sends, however long a commit or a request took. The price: a
request of d seconds holds its room for W + d. The same row per key carries the shared back-off of a `retry-after` and
the outage guard (gormes/control/outage.py).

    limits = ProviderLimits.from_env(store, os.environ)
    async with limits.turn(provider.name, request) as turn:
        reply = await provider.complete(request)
        turn.used(reply.usage)

Waiting is not an observation: nothing of it is recorded on the run's stream, and
a replay, which never calls a provider, never waits. The clock and the sleep are
injected; by default the time moves with trio's clock (`TrioWallClock`), so
under trio's MockClock a test's waits are virtual.

A sliding window holds for a server that counts fixed windows too. Hosts' clocks
must agree to a small part of the window (NTP): a host whose clock runs s seconds
ahead sees others' leases s seconds older than they are. A lease whose process
died in flight counts until IN_FLIGHT_TTL_S has passed.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from gormes.actors.jobs.session import new_id
from gormes.control import limits_table as table
from gormes.control.outage import PROBE_POLL_S, PROBE_TTL_S, ProviderState, Wait, failed, guard, released, succeeded
from gormes.control.rate_rules import RateRule, RateRules, limit_key, rules_from_env
from gormes.events.store import EventStore, Transaction
from gormes.providers.base import ModelRequest, ProviderError, Usage, request_json

DEFAULT_OUTPUT_ESTIMATE = 1024  # output tokens a request with no max_tokens is counted for
BYTES_PER_TOKEN = 4  # a request's size in tokens, before the provider says
EPSILON_S = 0.001  # past the instant a lease ages out, so the next look finds it gone
UNGUARDED_SCHEMES = ("scripted",)  # no shared quota and no outage: guarded only by a rule
IN_FLIGHT_TTL_S = PROBE_TTL_S  # a lease never said sent (its process died) stops counting after this


def estimate_tokens(request: ModelRequest) -> int:
    """What a request may use: its bytes over four, and its max_tokens (or 1024)."""
    size = len(request_json(request))
    return math.ceil(size / BYTES_PER_TOKEN) + (request.max_tokens or DEFAULT_OUTPUT_ESTIMATE)


def window_room(leases: list[tuple[float, int, bool]], rule: RateRule, now: float, estimate: int,
                poll_s: float = PROBE_POLL_S) -> Wait | None:
    """Whether one more request of `estimate` tokens fits the window that ends at
    `now` (None), or when to look again. `leases`: the ones that count, as (at,
    tokens, sent): a sent one frees its room at `at` + the window, one still in
    flight at an unknown time (look again in `poll_s`). A request bigger than
    the whole token limit is counted as the limit: it goes when the window is
    empty. Pure."""
    frees = sorted((at + rule.window_s if sent else now + poll_s, tokens) for at, tokens, sent in leases)
    until, what = 0.0, ""
    if rule.requests is not None and len(frees) >= rule.requests:
        until, what = frees[len(frees) - rule.requests][0], "requests"  # that many must free their room
    if rule.tokens is not None:
        need = min(estimate, rule.tokens)
        used = sum(tokens for _, tokens in frees)
        for at, tokens in frees:
            if used + need <= rule.tokens:
                break
            used -= tokens
            if at > until:
                until, what = at, "tokens"
    if until <= now:
        return None
    return Wait(until=until + EPSILON_S, reason=f"{rule.text()}: no {what} left in the window")


class Admitted(msgspec.Struct, frozen=True, kw_only=True):
    lease_id: str | None  # None: no rule, no lease
    probe: bool  # this turn is the outage guard's one probe
    state: ProviderState  # the key's row as the turn found it


class Turn:
    """One model turn's place in the limits; `used(tokens)` corrects its lease."""

    def __init__(self, key: str, holder: str, admitted: Admitted) -> None:
        self.key = key
        self.holder = holder
        self.lease_id = admitted.lease_id
        self.probe = admitted.probe
        self.found = admitted.state
        self.tokens: int | None = None  # what the reply used; None: not known (the estimate stays)
        self.waited_s = 0.0  # how long the turn waited for room, the back-off or the probe

    def used(self, usage: Usage) -> None:
        """What the reply used (input and output): the lease's tokens from now on."""
        self.tokens = usage.input + usage.output


class TrioWallClock:
    """Seconds since the epoch that move with trio's clock: the wall time when first
    read, then trio's (monotonic) time since. Under a MockClock it is virtual,
    like the sleeps it is compared with, so a test never waits for real."""

    def __init__(self) -> None:
        self._offset: float | None = None

    def __call__(self) -> float:
        now = trio.current_time()
        if self._offset is None:
            self._offset = time.time() - now
        return self._offset + now


_prepared: weakref.WeakSet[Any] = weakref.WeakSet()  # stores whose tables are known to exist


class ProviderLimits:
    """The rate limits, shared back-off and outage guard of every model turn a
    RunManager drives (gormes/actors/runs/live.py `llm`)."""

    def __init__(
        self, store: EventStore, rules: RateRules = RateRules(), *, outage_after: int = 5,
        clock: Callable[[], float] | None = None, sleep: Callable[[float], Awaitable[None]] = trio.sleep,
        probe_ttl_s: float = PROBE_TTL_S, poll_s: float = PROBE_POLL_S,
    ) -> None:
        self.store = store
        self.rules = rules
        self.outage_after = outage_after
        self.clock = clock or TrioWallClock()
        self._sleep = sleep
        self.probe_ttl_s = probe_ttl_s
        self.poll_s = poll_s

    @classmethod
    def from_env(cls, store: EventStore, env: Mapping[str, str], **options: Any) -> ProviderLimits:
        """With GORMES_RATE_LIMITS and GORMES_OUTAGE_AFTER (gormes/control/rate_rules.py)."""
        rules, after = rules_from_env(env)
        return cls(store, rules, outage_after=after, **options)

    def guarded(self, key: str) -> bool:
        return self.rules.for_key(key) is not None or (
            key.partition(":")[0] not in UNGUARDED_SCHEMES and self.outage_after > 0)

    def watches(self, provider_name: str, model: str) -> bool:
        """Whether `turn` does anything for a turn of this provider and model; when
        not, it yields at once and a caller may run the request without it."""
        return not self.store.readonly and self.guarded(limit_key(provider_name, model))

    # -- a turn ------------------------------------------------------------------------

    @asynccontextmanager
    async def turn(self, provider_name: str, request: ModelRequest) -> AsyncIterator[Turn]:
        """Wait for room, the back-off and the probe, then run the block (the
        request); after it, say when the request left and what it used, and tell
        the guard how it went. A key nothing guards (the scripted provider with
        no rule) goes at once."""
        key = limit_key(provider_name, request.model)
        if not self.watches(provider_name, request.model):
            yield Turn(key, "", Admitted(lease_id=None, probe=False, state=ProviderState(key=key)))
            return
        rule = self.rules.for_key(key)
        estimate = estimate_tokens(request) if rule is not None and rule.tokens is not None else 0
        holder = new_id()
        started = self.clock()
        turn = Turn(key, holder, await self._admit(key, rule, estimate, holder))
        turn.waited_s = max(0.0, self.clock() - started)
        try:
            yield turn
        except ProviderError as exc:
            with trio.CancelScope(shield=True):
                await self._failed(turn, exc)
            raise
        except BaseException:
            if turn.probe or turn.lease_id is not None:
                with trio.CancelScope(shield=True):
                    await self._update(turn, lambda state, now: released(state, now, holder))
            raise
        with trio.CancelScope(shield=True):
            await self._succeeded(turn)

    async def _admit(self, key: str, rule: RateRule | None, estimate: int, holder: str) -> Admitted:
        await self._prepare()
        while True:
            decided = await self._try(key, rule, estimate, holder)
            if isinstance(decided, Admitted):
                return decided
            await self._sleep(max(0.0, decided.until - self.clock()))

    async def _try(self, key: str, rule: RateRule | None, estimate: int, holder: str) -> Admitted | Wait:
        if rule is None:  # the guard alone: a read, and a write only to take the probe
            state = await self.store.read_sql(lambda conn: table.read_state(conn, key))
            first = guard(state, self.clock(), holder, probe_ttl_s=self.probe_ttl_s, poll_s=self.poll_s)
            if first is None:
                return Admitted(lease_id=None, probe=False, state=state)
            if isinstance(first, Wait):
                return first
        lease_id = new_id() if rule is not None else None
        now = self.clock()  # read here: the transaction runs in the writer's thread

        def take(tx: Transaction) -> Admitted | Wait:
            state = table.lock_state(tx, key)
            guarded = guard(state, now, holder, probe_ttl_s=self.probe_ttl_s, poll_s=self.poll_s)
            if isinstance(guarded, Wait):
                return guarded
            if rule is not None:
                leases = table.window_leases(tx, key, now - rule.window_s, now - IN_FLIGHT_TTL_S)
                full = window_room(leases, rule, now, estimate, self.poll_s)
                if full is not None:
                    return full
                table.take_lease(tx, lease_id, key, now, min(estimate, rule.tokens or estimate))
            if guarded is not None:
                table.write_state(tx, guarded)
            return Admitted(lease_id=lease_id, probe=guarded is not None, state=state)

        # Shielded: a lease or the probe taken is one the turn knows it holds (a
        # cancel lands in the block instead, and a probe is given back there).
        with trio.CancelScope(shield=True):
            return await self.store.transact(take)

    async def _prepare(self) -> None:
        if self.store in _prepared:
            return
        await self.store.transact(table.create)
        _prepared.add(self.store)

    async def _update(self, turn: Turn, change: Callable[[ProviderState, float], ProviderState]) -> None:
        """The turn's lease settled (counted from now, with the tokens it used) and
        the key's row changed by `change`, in one transaction."""
        now = self.clock()

        def write(tx: Transaction) -> None:
            if turn.lease_id is not None:
                table.settle_lease(tx, turn.lease_id, now, turn.tokens)
            state = table.lock_state(tx, turn.key)
            new = change(state, now)
            if new != state:
                table.write_state(tx, new)

        await self.store.transact(write)

    async def _failed(self, turn: Turn, exc: ProviderError) -> None:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

        def change(state: ProviderState, now: float) -> ProviderState:
            return failed(state, now, holder=turn.holder, error=text[:300], retryable=exc.retryable,
                          status=exc.status, retry_after=exc.retry_after, threshold=self.outage_after)

        await self._update(turn, change)

    async def _succeeded(self, turn: Turn) -> None:
        if turn.lease_id is None and turn.found.clear and not turn.probe:
            # Nothing counted when the turn began: look again (another caller may
            # have failed meanwhile) before writing anything.
            now_state = await self.store.read_sql(lambda conn: table.read_state(conn, turn.key))
            if now_state.clear:
                return
        await self._update(turn, lambda state, now: succeeded(state, now))
