"""Provider rate limits, the shared back-off and the outage guard, on both backends.

Two stores opened on one database stand for two workers (two connections, as two
processes have); their limiters share one virtual clock (trio's MockClock,
autojump), so the windows are seconds long and no test waits for them. The
processes themselves, against a local server, are in test_rate_limits_processes.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from gormes.actors.runs.context import RunHandlerRegistry
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.control import limits_table as table
from gormes.control.outage import ProviderState, Wait, failed, guard, succeeded
from gormes.control.rate_limits import ProviderLimits, estimate_tokens, window_room
from gormes.control.rate_rules import InvalidRateLimit, RateRule, parse_rules, rules_from_env
from gormes.events.postgres import PostgresEventStore
from gormes.events.sqlite import SQLiteEventStore
from gormes.providers.base import Message, ModelReply, ModelRequest, ProviderError, Usage
from pg_helpers import PG_URL, fresh_schema

BACKENDS = ["sqlite", "postgres"]
REQUEST = ModelRequest(model="m", messages=(Message(role="user", content="hi"),), max_tokens=50)


def virtual() -> float:
    return trio.current_time()


@asynccontextmanager
async def two_stores(backend: str, path: Path) -> AsyncIterator[tuple[object, object]]:
    """Two stores on one database: two workers' connections."""
    if backend == "sqlite":
        async with SQLiteEventStore.open(path) as a, SQLiteEventStore.open(path) as b:
            yield a, b
        return
    with fresh_schema() as schema:
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as a, \
                PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as b:
            yield a, b


class Model:
    """A provider that answers after `took` (virtual) seconds, or raises what is
    queued; it keeps the time each request left and how many were in flight."""

    name = "openai:m"
    model = "m"

    def __init__(self, took: float = 0.5, usage: Usage = Usage(input=5, output=2)) -> None:
        self.took, self.usage = took, usage
        self.sent: list[float] = []
        self.spans: list[tuple[float, float, bool]] = []  # (left, answered, ok)
        self.errors: list[ProviderError] = []
        self.in_flight = self.most_in_flight = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        left = trio.current_time()
        self.sent.append(left)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await trio.sleep(self.took)
            if self.errors:
                self.spans.append((left, trio.current_time(), False))
                raise self.errors.pop(0)
        finally:
            self.in_flight -= 1
        self.spans.append((left, trio.current_time(), True))
        return ModelReply(message=Message(role="assistant", content="ok"), usage=self.usage,
                          finish_reason="stop", model="m")


async def call(limits: ProviderLimits, model: Model) -> str:
    """One model turn through the limits, as LiveRunContext.llm makes it."""
    try:
        async with limits.turn(model.name, REQUEST) as turn:
            reply = await model.complete(REQUEST)
            turn.used(reply.usage)
    except ProviderError as exc:
        return f"error: {exc}"
    return "ok"


def most_in_window(times: list[float], window: float) -> int:
    times, most, start = sorted(times), 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most


async def states(store) -> dict[str, ProviderState]:
    return {s.key: s for s in await store.read_sql(table.all_states)}


# -- the rules, and the pure decisions ---------------------------------------------------


def test_rules_read_per_minute_and_per_window_and_the_first_match_wins() -> None:
    rules = parse_rules("openai:gpt-4o=500rpm,200000tpm; openai:*=60rpm  anthropic:*=3req,2000tok/2s")
    assert rules.for_key("openai:gpt-4o") == RateRule(pattern="openai:gpt-4o", requests=500, tokens=200000)
    assert rules.for_key("openai:gpt-4o-mini") == RateRule(pattern="openai:*", requests=60)
    assert rules.for_key("anthropic:claude") == RateRule(pattern="anthropic:*", requests=3, tokens=2000,
                                                         window_s=2.0)
    assert rules.for_key("scripted:x") is None
    assert [r.text() for r in rules.rules] == [
        "openai:gpt-4o=500rpm,200000tpm", "openai:*=60rpm", "anthropic:*=3req,2000tok/2s"]
    assert rules_from_env({}) == (parse_rules(""), 5)
    assert rules_from_env({"GORMES_OUTAGE_AFTER": "0"})[1] == 0


@pytest.mark.parametrize("text", [
    "openai:m", "openai:m=", "=5rpm", "openai:m=5rps", "openai:m=0rpm", "openai:m=5rpm,6rpm",
    "openai:m=5rpm/2s", "openai:m=5req/0s", "openai:m=5req/fast", "openai:m=-1rpm",
])
def test_a_bad_rule_is_one_clear_error(text: str) -> None:
    with pytest.raises(InvalidRateLimit) as caught:
        parse_rules(text)
    assert "\n" not in str(caught.value) and text.split("=")[0] in str(caught.value)


@pytest.mark.parametrize("value", ["-1", "five"])
def test_a_bad_outage_threshold_is_refused(value: str) -> None:
    with pytest.raises(InvalidRateLimit):
        rules_from_env({"GORMES_OUTAGE_AFTER": value})


def test_the_window_says_when_the_lease_in_the_way_frees_its_room() -> None:
    rule = RateRule(pattern="*", requests=3, tokens=100, window_s=10.0)
    assert window_room([], rule, 0.0, 40) is None
    assert window_room([(1.0, 10, True), (2.0, 10, True)], rule, 5.0, 40) is None
    full = window_room([(1.0, 10, True), (2.0, 10, True), (3.0, 10, True)], rule, 5.0, 40)
    assert isinstance(full, Wait) and full.until == pytest.approx(11.0, abs=0.01) and "requests" in full.reason
    # tokens: 60 + 50 > 100, so the 60 must go; then 50 + 50 fits
    tokens = window_room([(1.0, 60, True), (2.0, 30, True)], rule, 5.0, 50)
    assert isinstance(tokens, Wait) and tokens.until == pytest.approx(11.0, abs=0.01) and "tokens" in tokens.reason
    assert window_room([(1.0, 60, True), (2.0, 30, True)], rule, 5.0, 10) is None
    # bigger than the whole limit: counted as the limit, it goes into an empty window
    assert window_room([], rule, 0.0, 10_000) is None
    assert window_room([(1.0, 1, True)], rule, 5.0, 10_000).until == pytest.approx(11.0, abs=0.01)
    # in flight, however old: it counts, and when it frees its room is not known yet
    in_flight = window_room([(-50.0, 10, False), (1.0, 10, True), (2.0, 10, True)], rule, 5.0, 1, poll_s=1.0)
    assert isinstance(in_flight, Wait) and in_flight.until == pytest.approx(6.0, abs=0.01)


def test_the_estimate_is_the_request_and_its_max_tokens() -> None:
    assert estimate_tokens(REQUEST) > 50
    unbounded = ModelRequest(model="m", messages=REQUEST.messages)
    # 1024 output tokens for 50 (and "null" for "50" in the request's bytes)
    assert abs(estimate_tokens(unbounded) - (estimate_tokens(REQUEST) - 50 + 1024)) <= 1


def test_the_guard_opens_after_consecutive_failures_and_one_success_closes_it() -> None:
    state = ProviderState(key="openai:m")
    for i in range(4):
        state = failed(state, float(i), holder="h", error="503", retryable=True, status=503,
                       retry_after=None, threshold=5)
    assert state.failures == 4 and not state.is_open
    # a 429 is back-pressure, a 400 the caller's own: neither counts
    for status, retryable in ((429, True), (400, False)):
        state = failed(state, 4.0, holder="h", error="x", retryable=retryable, status=status,
                       retry_after=None, threshold=5)
    assert state.failures == 4 and not state.is_open
    state = failed(state, 5.0, holder="h", error="503 down", retryable=True, status=503, retry_after=None,
                   threshold=5)
    assert state.is_open and state.open_since == 5.0 and state.last_error == "503 down"
    probe = guard(state, 6.0, "p1")
    assert isinstance(probe, ProviderState) and probe.probe_holder == "p1"
    waiting = guard(probe, 6.5, "p2")
    assert isinstance(waiting, Wait) and "probe" in waiting.reason
    assert guard(probe, 6.0 + 301, "p2").probe_holder == "p2"  # a vanished probe frees the way
    # the probe fails: still open, the next turn may probe
    after = failed(probe, 7.0, holder="p1", error="503", retryable=True, status=503, retry_after=None, threshold=5)
    assert after.is_open and after.probe_holder is None
    closed = succeeded(after, 8.0)
    assert closed.clear and guard(closed, 8.0, "p3") is None
    assert succeeded(closed, 9.0) is closed  # nothing to write


def test_a_retry_after_blocks_everyone_until_it_passes_capped() -> None:
    state = failed(ProviderState(key="k"), 10.0, holder="h", error="429 slow down", retryable=True, status=429,
                   retry_after=3.0, threshold=5)
    waiting = guard(state, 11.0, "other")
    assert isinstance(waiting, Wait) and waiting.until == 13.0 and "429 slow down" in waiting.reason
    assert guard(state, 13.0, "other") is None
    far = failed(ProviderState(key="k"), 0.0, holder="h", error="x", retryable=True, status=429,
                 retry_after=10_000.0, threshold=5)
    assert far.blocked_until == 120.0
    # a shorter retry-after does not shorten a longer back-off
    assert failed(far, 1.0, holder="h", error="y", retryable=True, status=429, retry_after=1.0,
                  threshold=5).blocked_until == 120.0


# -- two workers on one database -----------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_workers_never_send_more_than_the_shared_limit(backend, tmp_path, autojump_clock) -> None:
    rules = parse_rules("openai:m=3req/10s")
    model = Model(took=0.5)
    async with two_stores(backend, tmp_path / "limits.db") as (a, b):
        limiters = [ProviderLimits(s, rules, clock=virtual) for s in (a, b)]
        results: list[str] = []

        async def worker(limits: ProviderLimits) -> None:
            for _ in range(6):
                results.append(await call(limits, model))

        async with trio.open_nursery() as nursery:
            for limits in limiters:
                nursery.start_soon(worker, limits)
    assert results == ["ok"] * 12
    assert most_in_window(model.sent, 10.0) == 3  # never 6 (3 each), never more than 3
    assert model.sent[-1] - model.sent[0] >= 30.0  # 12 requests at 3 per 10 s: four windows


@pytest.mark.parametrize("backend", BACKENDS)
async def test_tokens_are_leased_as_estimated_and_corrected_to_what_was_used(backend, tmp_path,
                                                                             autojump_clock) -> None:
    estimate = estimate_tokens(REQUEST)
    rules = parse_rules(f"openai:m={2 * estimate}tok/10s")  # two estimates fit, three do not
    model = Model(took=0.1, usage=Usage(input=5, output=2))
    async with two_stores(backend, tmp_path / "limits.db") as (a, b):
        limits_a, limits_b = (ProviderLimits(s, rules, clock=virtual) for s in (a, b))
        assert await call(limits_a, model) == "ok"
        used = await a.read_sql(lambda conn: table.window_usage(conn, -1.0))
        assert used == {"openai:m": (1, 7)}  # corrected from the estimate to 5 + 2
        # with the correction, far more than two fit in the window
        for limits in (limits_a, limits_b, limits_a, limits_b):
            assert await call(limits, model) == "ok"
    assert model.sent[-1] - model.sent[0] < 10.0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_429_with_retry_after_stops_the_other_worker_too(backend, tmp_path, autojump_clock) -> None:
    model = Model(took=0.1)
    async with two_stores(backend, tmp_path / "limits.db") as (a, b):
        limits_a, limits_b = (ProviderLimits(s, clock=virtual) for s in (a, b))  # no rule: the back-off alone
        model.errors.append(ProviderError("HTTP 429: slow down", retryable=True, status=429, retry_after=20.0))
        assert (await call(limits_a, model)).startswith("error: HTTP 429")
        told_at = trio.current_time()
        assert await call(limits_b, model) == "ok"  # the other worker, never told itself
        assert model.sent[-1] - told_at >= 20.0 - 0.2
        assert (await states(b))["openai:m"].blocked_reason == "HTTP 429: slow down"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_outage_halts_new_turns_but_one_probe_at_a_time(backend, tmp_path, autojump_clock) -> None:
    model = Model(took=1.0)
    async with two_stores(backend, tmp_path / "limits.db") as (a, b):
        limits_a, limits_b = (ProviderLimits(s, outage_after=3, clock=virtual) for s in (a, b))
        down = [ProviderError("HTTP 503: down", retryable=True, status=503) for _ in range(5)]
        model.errors.extend(down)
        for limits in (limits_a, limits_b, limits_a):  # three callers' failures in a row
            assert (await call(limits, model)).startswith("error: HTTP 503")
        opened = (await states(a))["openai:m"]
        assert opened.is_open and opened.failures == 3
        model.spans.clear()
        results: list[str] = []

        async def turn(limits: ProviderLimits) -> None:
            results.append(await call(limits, model))

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(turn, (limits_a, limits_b)[i % 2])
        assert not (await states(b))["openai:m"].is_open
    # two probes failed (the errors left), the third succeeded and closed the
    # guard; the probes went one at a time, and the other five only after
    assert results.count("ok") == 6 and sum(r.startswith("error") for r in results) == 2
    spans = sorted(model.spans)
    probes, rest = spans[:3], spans[3:]
    assert [ok for _, _, ok in probes] == [False, False, True]
    assert all(probes[i][1] <= probes[i + 1][0] for i in range(2)), probes  # never two at once
    assert all(left >= probes[2][1] for left, _, _ in rest), (probes, rest)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_while_open_only_one_request_is_in_flight(backend, tmp_path, autojump_clock) -> None:
    model = Model(took=2.0)
    async with two_stores(backend, tmp_path / "limits.db") as (a, b):
        limits_a, limits_b = (ProviderLimits(s, outage_after=1, clock=virtual) for s in (a, b))
        model.errors.extend(ProviderError("HTTP 500", retryable=True, status=500) for _ in range(7))
        assert (await call(limits_a, model)).startswith("error")
        model.most_in_flight = 0

        async def turn(limits: ProviderLimits) -> None:
            await call(limits, model)

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(turn, (limits_a, limits_b)[i % 2])
        assert model.most_in_flight == 1 and len(model.spans) == 7  # six probes, one after another
        assert (await states(a))["openai:m"].is_open and (await states(a))["openai:m"].failures == 7


async def test_a_cancelled_probe_frees_the_way(store, autojump_clock) -> None:
    model = Model(took=100.0)
    limits = ProviderLimits(store, outage_after=1, clock=virtual)
    model.errors.append(ProviderError("HTTP 500", retryable=True, status=500))
    model.took = 0.1
    assert (await call(limits, model)).startswith("error")
    model.took = 100.0
    with trio.move_on_after(5.0):
        await call(limits, model)  # the probe, cancelled mid-request
    assert (await states(store))["openai:m"].probe_holder is None
    model.took = 0.1
    assert await call(limits, model) == "ok"
    assert not (await states(store))["openai:m"].is_open


# -- through a run: the seam in LiveRunContext.llm -------------------------------------------


async def ask(ctx, input):
    reply = await ctx.llm(ModelRequest(model=ctx.model_name, messages=(Message(role="user", content="hi"),)))
    return reply.message.content


async def test_runs_wait_for_room_and_still_replay_exactly(store, db_path, autojump_clock) -> None:
    model = Model(took=0.1)
    handlers = RunHandlerRegistry({"ask": ask})
    limits = ProviderLimits(store, parse_rules("openai:m=2req/10s"), clock=virtual)
    async with RunManager.open(store, handlers=handlers, providers=lambda spec: model,
                               provider_limits=limits) as runs:
        outcomes = []

        async def one() -> None:
            outcomes.append(await runs.run("ask", None, model="openai:m"))

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(one)
    assert [o.status for o in outcomes] == ["completed"] * 5
    assert most_in_window(model.sent, 10.0) == 2 and model.sent[-1] - model.sent[0] >= 20.0
    with DatabaseRuns(db_path) as source:
        for outcome in outcomes:
            report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
            assert report.tree_exact  # the waits were never observations


async def test_the_scripted_provider_is_not_guarded_unless_a_rule_names_it(store) -> None:
    limits = ProviderLimits(store)
    assert not limits.guarded("scripted:demo") and limits.guarded("openai:m")
    assert ProviderLimits(store, parse_rules("scripted:*=1rpm")).guarded("scripted:demo")
    assert not ProviderLimits(store, outage_after=0).guarded("openai:m")


# -- configuration: the daemon's settings ------------------------------------------------------


def test_the_daemons_settings_set_the_limits_for_every_run_it_drives(tmp_path, monkeypatch) -> None:
    from gormes.daemon import apply_to_environment, load_settings

    path = tmp_path / "daemon.toml"
    path.write_text('rate_limits = ["openai:gpt-4o=500rpm,200000tpm", "anthropic:*=50rpm"]\noutage_after = 3\n')
    monkeypatch.delenv("GORMES_RATE_LIMITS", raising=False)
    monkeypatch.delenv("GORMES_OUTAGE_AFTER", raising=False)
    apply_to_environment(load_settings(path, {}))
    rules, after = rules_from_env(__import__("os").environ)
    assert [r.text() for r in rules.rules] == ["openai:gpt-4o=500rpm,200000tpm", "anthropic:*=50rpm"]
    assert after == 3


@pytest.mark.parametrize("text", ['rate_limits = ["openai:gpt-4o=fast"]', "outage_after = -2"])
def test_bad_limits_in_the_daemons_settings_are_one_clear_error(tmp_path, text: str) -> None:
    from gormes.daemon import InvalidSettings, load_settings

    path = tmp_path / "daemon.toml"
    path.write_text(text + "\n")
    with pytest.raises(InvalidSettings, match="rate_limits: "):
        load_settings(path, {})
