"""The gateways' call rate: how often the gateway class may call, every gateway together.

The caps on what a gateway holds (its class's live jobs, decision 0070; its
facts, decision 0061) say nothing of how often it calls: a client could call
`memory.recall` or `job.list` as fast as it can send, from as many connections
as it likes. `GORMES_GATEWAY_RATE` bounds that (decision 0072):

    GORMES_GATEWAY_RATE=600rpm      # the default: 600 calls a minute
    GORMES_GATEWAY_RATE=20req/1s    # another window: req per the window after the slash
    GORMES_GATEWAY_RATE=off         # no limit

The syntax is a provider rate limit's (gormes/control/rate_rules.py) with
requests only: a call is a request, and has no tokens. The limit is the class's,
not the caller's, as the other caps are: an MCP client names itself, so a quota
per name would be multiplied by connecting under new names.

Every call a gateway makes outside a run takes a lease in the provider limits'
sliding window (gormes/control/limits_table.py, key `calls:gateway`), checked and
taken in one store transaction, so every `gormes mcp` process on every host that
uses the store shares the one quota: no window of the setting's length holds more
admitted calls than it allows. A call with no room is refused before its handler
runs (`CallRateLimited`, an `OperationDenied`: one line with the limit and when to
retry), takes no lease, and is audited by the executor like every refusal. The
executor asks `GatewayCallRate` (its `call_limit`) about each call; the MCP server
gives it one (gormes/mcp_server.py).

Each client also has a share of the class's rate, in addition to it
(`GORMES_GATEWAY_CLIENT_RATE`, a quarter by default; gormes/control/call_shares.py,
decision 0082): a call is admitted only when both windows have room, looked at and
leased in the same transaction, so one greedy client leaves the others room and new
names get no more than the class's rate together.

A gateway's runs (and every child agent, which only ever acts in a run) are not
limited here: their calls are made by a model, one turn at a time, and the
provider limits and budgets govern the turns. The operator and the system are
never limited.

Leases that have left the window are deleted by the next call's look, so the
key holds at most the limit's count of rows. Hosts' clocks must agree to a small
part of the window (NTP), as for the provider limits.

A connection refused more often within a window than it could be served is
ended (`flooded`, decision 0072's addendum) and marked in the store
(gormes/control/call_floods.py); while a mark is within the window and the window
is full, a new connection's first limited call is refused with a line that says
when to come back, and that connection is ended too (`turned_away`, decision 0081).

What it did is the operator's to see (decision 0075): `gormes top` and `gormes
doctor` count the refusals' audit records through an index of them the database
keeps (gormes/control/call_refusals.py), which a process makes before its first
limited call (`ensure_refusals_index`), and read the setting that refused them
back out of their line (`stated_rule`): the store does not hold each process's.
"""

from __future__ import annotations

import logging
import math
import re
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import trio

from gormes.actors.jobs.session import new_id
from gormes.control import call_floods, call_refusals
from gormes.control import limits_table as table
from gormes.control.call_shares import CLIENT_RATE_ENV, TWIN, default_share, share_key
from gormes.control.rate_rules import MINUTE, InvalidRateLimit, RateRule, parse_limits
from gormes.events.store import EventStore, Transaction
from gormes.ops.spec import Caller, CallRateLimited

GATEWAY_RATE_ENV = "GORMES_GATEWAY_RATE"
DEFAULT_GATEWAY_RATE = "600rpm"
OFF = "off"
# The most calls a window may allow: the key holds a lease row for each call in the
# window, so this bounds its rows (and keeps the count a database integer).
MAX_CALLS = 1_000_000
# A connection refused this many times within one window (or the window's allowance
# of calls, if more) is not waiting for its retry: its server ends it (`flooded`).
MIN_FLOOD = 100
LIMITED = "gateway"  # the trust class whose calls are limited
KEY = f"calls:{LIMITED}"  # its lease key in `rate_leases`

_prepared: weakref.WeakSet[Any] = weakref.WeakSet()  # stores whose tables are known to exist
_indexing: weakref.WeakSet[Any] = weakref.WeakSet()  # stores whose refusals' index was made or tried
_STATED = re.compile(rf"[(\s]{GATEWAY_RATE_ENV}=([^)\s]+)\)")  # in a refusal's line (see `_limit_line`)
_STATED_SHARE = re.compile(rf"\({CLIENT_RATE_ENV}=(\S+) of ")  # in a refusal by a client's share
log = logging.getLogger("gormes.control")


def parse_call_rate(value: str | None, variable: str = GATEWAY_RATE_ENV) -> RateRule | None:
    """The limit `value` sets (unset or empty: the default), or None for `off`. A
    value that is not a rate is an `InvalidRateLimit` (a `UserError`) naming the
    setting."""
    text = DEFAULT_GATEWAY_RATE if value is None or not value.strip() else value.strip()
    if text.lower() == OFF:
        return None
    label = f"{variable}={value!r}"
    try:
        requests, tokens, window = parse_limits(text, label)
    except InvalidRateLimit as exc:
        raise InvalidRateLimit(f"{exc}; a call limit reads like 600rpm or 20req/1s, or off") from None
    if tokens is not None or requests is None:
        raise InvalidRateLimit(f"{label}: a call limit counts calls, not tokens: Nrpm, or Nreq/WINDOW, or off")
    if requests > MAX_CALLS:
        raise InvalidRateLimit(f"{label}: a window may allow at most {MAX_CALLS:,} calls (off turns the limit off)")
    return RateRule(pattern=KEY, requests=requests, window_s=window)


def call_rate_from_env(env: Mapping[str, str]) -> RateRule | None:
    """`GORMES_GATEWAY_RATE` as the environment sets it (see `parse_call_rate`)."""
    return parse_call_rate(env.get(GATEWAY_RATE_ENV))


def parse_client_share(value: str | None, rule: RateRule | None) -> RateRule | None:
    """A client's share (`GORMES_GATEWAY_CLIENT_RATE`, decision 0082) of the class's
    limit `rule`: unset or empty, a quarter of it (`call_shares.default_share`); `off`
    or a class with no limit, None. Written as the class's limit is; a share set
    while the class's limit is off (alone it would be a quota per name, escaped by
    new names), or counted over a window longer than the class's, is an
    `InvalidRateLimit` naming the setting."""
    if value is None or not value.strip():
        return None if rule is None else default_share(rule)
    share = parse_call_rate(value, CLIENT_RATE_ENV)
    if share is None:
        return None
    label = f"{CLIENT_RATE_ENV}={value!r}"
    if rule is None:
        raise InvalidRateLimit(f"{label}: a client's share is of the gateways' call rate, which"
                               f" {GATEWAY_RATE_ENV}=off turns off; set {CLIENT_RATE_ENV}=off too, or a class rate")
    if share.window_s > rule.window_s:
        raise InvalidRateLimit(f"{label}: a client's share is counted within the class's window"
                               f" ({GATEWAY_RATE_ENV}={written(rule)}): its window may be at most {rule.window_s:g}s")
    return share


def client_share_from_env(env: Mapping[str, str], rule: RateRule | None) -> RateRule | None:
    """`GORMES_GATEWAY_CLIENT_RATE` as the environment sets it (see `parse_client_share`)."""
    return parse_client_share(env.get(CLIENT_RATE_ENV), rule)


def describe(rule: RateRule) -> str:
    """`600 calls a minute`, `20 calls per 1s`."""
    per = "a minute" if rule.window_s == MINUTE else f"per {rule.window_s:g}s"
    return f"{rule.requests} call{'' if rule.requests == 1 else 's'} {per}"


def written(rule: RateRule) -> str:
    """The rule as the setting writes it: `600rpm`, `20req/1s`."""
    return f"{rule.requests}rpm" if rule.window_s == MINUTE else f"{rule.requests}req/{rule.window_s:g}s"


def stated_rule(error: str | None) -> RateRule | None:
    """The setting a refusal's line states (`... (GORMES_GATEWAY_RATE=600rpm); retry
    in 12s`): the limit of the process that refused it. None when it states none
    this gormes reads."""
    found = _STATED.search(error or "")
    if found is None:
        return None
    try:
        return parse_call_rate(found.group(1))
    except InvalidRateLimit:
        return None


def stated_share(error: str | None) -> RateRule | None:
    """The client's share a refusal's line states, when that share refused it
    (`... (GORMES_GATEWAY_CLIENT_RATE=150rpm of GORMES_GATEWAY_RATE=600rpm); retry in
    12s`, decision 0082); None for the class's refusals and lines this gormes does
    not read."""
    found = _STATED_SHARE.search(error or "")
    if found is None:
        return None
    try:
        return parse_call_rate(found.group(1), CLIENT_RATE_ENV)
    except InvalidRateLimit:
        return None


async def ensure_refusals_index(store: EventStore) -> None:
    """Make the index the refusals are counted by (gormes/control/call_refusals.py),
    once per store and process, before the first limited call: a read finds it made,
    else a transaction of its own makes it. A store that cannot make it (a
    PostgreSQL role that does not own `events`) still limits every call; the
    failure is logged once (the process does not try again), and `gormes doctor`
    says the refusals cannot be counted."""
    if store in _indexing:
        return
    _indexing.add(store)  # at once: the calls that start beside this one go on
    try:
        if not await store.read_sql(call_refusals.indexed):
            await store.transact(call_refusals.create_index)
    except trio.Cancelled:
        _indexing.discard(store)  # the call was cancelled, not the index refused: the next call tries
        raise
    except Exception as exc:  # noqa: BLE001 - counting refusals is not worth refusing every call
        log.warning("the index of the gateways' refused calls (%s) could not be made (%s: %s); until it is,"
                    " `gormes doctor` and `gormes top` cannot count them", call_refusals.INDEX,
                    type(exc).__name__, exc)


class GatewayCallRate:
    """The executor's `call_limit` for the gateway class (see the module doc)."""

    def __init__(self, store: EventStore, rule: RateRule, *, share: RateRule | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if rule.requests is None or (share is not None and share.requests is None):
            raise ValueError("a call limit counts requests")
        if share is not None and share.window_s > rule.window_s:
            raise ValueError("a client's share is counted within the class's window")
        self.store = store
        self.rule = rule
        self.share = share  # each client's share of `rule` (decision 0082); None: none
        self.clock = clock  # seconds since the epoch, read from any thread: every host's leases are compared on it
        # Until when the window is known to be full (see `admit`); 0: not known.
        self.full_until = 0.0
        # Until when a client's share is known to be used, by caller id (a process serves one client).
        self.share_full: dict[str, float] = {}
        # The most a client can be served in a window: refused more often than that within one, it is
        # `flooded`. With a share that is the share, else the class's count.
        self.flood_rule = share or rule
        assert self.flood_rule.requests is not None
        # When this process's last refusals were made (its caller's), as many as `flooded` counts.
        self.refusals: deque[float] = deque(maxlen=max(self.flood_rule.requests, MIN_FLOOD))
        self.marked = False  # this connection's flood is marked in the store (decision 0081)
        self.started = False  # its first limited call was admitted, or refused for the window alone
        # When the flood this connection was refused at its start for was ended (None:
        # it was not), and until when it was told to stay away.
        self.turned_away: float | None = None
        self.come_back_at = 0.0
        self.turned_by_share = False  # the window found full at its start was its client's share

    @property
    def flooded(self) -> bool:
        """Whether this process's caller kept calling while refused: refused more
        times within one window than the window allows calls (at least MIN_FLOOD).
        Each refusal is an audit record, so a client that never waits for its retry
        would grow the log as fast as it can send; gormes/mcp_server.py ends its
        connection."""
        refusals = self.refusals
        return len(refusals) == refusals.maxlen and refusals[-1] - refusals[0] <= self.flood_rule.window_s

    @property
    def ended(self) -> bool:
        """Whether this process's connection is to be ended: it flooded, or it was
        refused at its start."""
        return self.turned_away is not None or self.flooded

    def limits(self, caller: Caller) -> bool:
        """Whether `caller`'s calls count: a gateway's, made outside a run."""
        return caller.trust == LIMITED and caller.run_id is None

    async def admit(self, caller: Caller) -> None:
        """Take a lease for one call, or refuse it (`CallRateLimited`) when the
        class's window holds the limit's count of calls already, or its client's
        share's window holds the share's (decision 0082).

        A look that finds a window full finds when it frees (the limit's count
        of latest leases stay in it until the oldest of them ages out, whoever
        calls meanwhile, since a lease leaves only by its age), so until then this
        process refuses without asking the store: a flood's refusals cost the
        store only their audit records, not a write transaction each as well.

        A connection's first limited call that finds a window full also reads
        the latest flood mark within the class's window (decision 0081): if there
        is one, the call is refused at the start and the connection `ended`, as
        are the calls read beside it."""
        now = self.clock()
        if self.turned_away is not None:  # calls read beside the first, refused at the start
            await trio.lowlevel.checkpoint()
            raise self._turned_away(now)
        share_until = self.share_full.get(caller.id, 0.0) if self.share is not None else 0.0
        if now < max(self.full_until, share_until):
            await trio.lowlevel.checkpoint()  # as the look would: a caller refused in a loop stays cancellable
            by_share = now >= self.full_until
            refusal = self._refusal((share_until if by_share else self.full_until) - now, by_share)
            await self._mark_flood()
            raise refusal
        rule, share = self.rule, self.share
        count = rule.requests
        assert count is not None
        lease_id = new_id()
        client_key = None if share is None else share_key(KEY, caller.id)
        prepared = self.store in _prepared
        if not prepared:
            await ensure_refusals_index(self.store)
        starting = not self.started

        def take(tx: Transaction) -> tuple[float, float | None, bool, float | None]:
            if not prepared:
                table.create(tx)
            now = self.clock()  # read under the write lock: one host's leases are taken in time order
            table.delete_twins(tx, KEY, now - rule.window_s, TWIN)  # the shares' leases leaving with the class's
            frees: float | None = None  # when the window found full frees
            by_share = False  # and whether it was the client's share's
            nth = table.latest_leases(tx, KEY, now - rule.window_s, count)
            if nth is not None:
                frees = nth + rule.window_s
            elif share is not None and client_key is not None:
                assert share.requests is not None
                nth = table.latest_leases(tx, client_key, now - share.window_s, share.requests)
                if nth is not None:
                    frees, by_share = nth + share.window_s, True
            if frees is not None:
                flood = call_floods.latest_flood(tx, now, rule.window_s) if starting else None
                return now, frees, by_share, flood
            table.take_lease(tx, lease_id, KEY, now, 0, sent=True)
            if client_key is not None:
                table.take_lease(tx, lease_id + TWIN, client_key, now, 0, sent=True)
            return now, None, False, None

        looked, frees, by_share, flood = await self.store.transact(take)
        _prepared.add(self.store)
        if flood is not None and frees is not None and not self.started:
            self.turned_away = flood
            self.come_back_at = call_floods.come_back_at(flood, frees, rule.window_s)
            self.turned_by_share = by_share
            raise self._turned_away(looked)
        self.started = True
        if frees is not None:
            if by_share:
                if len(self.share_full) >= 64:  # one client a process; a test's executor may serve more
                    self.share_full = {k: v for k, v in self.share_full.items() if v > looked}
                self.share_full[caller.id] = max(self.share_full.get(caller.id, 0.0), frees)
            else:
                self.full_until = max(self.full_until, frees)
            refusal = self._refusal(frees - looked, by_share)
            await self._mark_flood()
            raise refusal

    async def _mark_flood(self) -> None:
        """Once this connection is `flooded`, mark it in the store (gormes/control/
        call_floods.py): a reconnection is then refused at its start while the window
        stays full. Held against the call's cancellation, as its audit record is; a
        store that cannot take it still ends the connection (one warning)."""
        if self.marked or not self.flooded:
            return
        self.marked = True
        mark_id, window = new_id(), self.rule.window_s
        try:
            with trio.CancelScope(shield=True):
                await self.store.transact(lambda tx: call_floods.mark(tx, mark_id, self.clock(), window))
        except Exception as exc:  # noqa: BLE001 - the refusal stands; only the next connection's start is not warned
            log.warning("a flooding gateway connection could not be marked in the store (%s: %s): a reconnection"
                        " is refused call by call, not at its start", type(exc).__name__, exc)

    def _turned_away(self, now: float) -> CallRateLimited:
        """The refusal of a call at this connection's start (decision 0081): it ends
        the connection, and says when to come back."""
        assert self.turned_away is not None
        wait = self.come_back_at - now
        ago = max(0, math.floor(now - self.turned_away))
        return CallRateLimited(
            f"{self._limit_line(self.turned_by_share)}; retry in {max(1, math.ceil(wait))}s; the connection closes"
            " at its start:"
            f" a gateway connection was ended for flooding {ago}s ago and the window is still full",
            retry_after_s=max(0.0, wait),
        )

    def _limit_line(self, by_share: bool = False) -> str:
        """The limit that refused: the class's (`... between them (GORMES_GATEWAY_RATE=
        600rpm)`, as before decision 0082), or the client's share (`each 'gateway'
        client may make at most 150 calls a minute of the class's (GORMES_GATEWAY_CLIENT_RATE=
        150rpm of GORMES_GATEWAY_RATE=600rpm)`), which states the class's limit too
        (`stated_rule` reads it back). Short: an audit record keeps 300 characters."""
        rule = self.rule
        if by_share and self.share is not None:
            share = self.share
            return (f"each {LIMITED!r} client may make at most {describe(share)} of the class's"
                    f" ({CLIENT_RATE_ENV}={written(share)} of {GATEWAY_RATE_ENV}={written(rule)})")
        return (f"{LIMITED!r} callers may make at most {describe(rule)} between them"
                f" ({GATEWAY_RATE_ENV}={written(rule)})")

    def _refusal(self, wait: float, by_share: bool = False) -> CallRateLimited:
        self.refusals.append(self.clock())
        closing = (f"; the connection closes: it was refused {len(self.refusals)} times within"
                   f" {self.flood_rule.window_s:g}s" if self.flooded else "")
        return CallRateLimited(
            f"{self._limit_line(by_share)}; retry in {max(1, math.ceil(wait))}s{closing}",
            retry_after_s=max(0.0, wait),
        )
