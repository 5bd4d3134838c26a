"""The actor runtime against the real SQLite store: ask/tell, conflicts retried,
rebuild from the stream, supervision and deadlines."""

from __future__ import annotations

import pytest
import trio
from actor_examples import (
    Account,
    AccountState,
    ChildLost,
    Deposit,
    Deposited,
    Explode,
    Guardian,
    InsufficientFunds,
    Withdraw,
)

from gormes.actors import (
    ActorAlreadyRunning,
    ActorFailed,
    ActorRuntime,
    ActorStopped,
    ChildFailed,
    ExitReason,
    RuntimeClosed,
    State,
)
from gormes.errors import ConcurrencyError
from gormes.events.sqlite import SQLiteEventStore

ACCOUNT = Account()
GUARDIAN = Guardian()


@pytest.fixture
async def store(tmp_path):
    async with SQLiteEventStore.open(tmp_path / "x.db") as store:
        yield store


@pytest.fixture
async def rt(store):
    async with ActorRuntime.open(store) as rt:
        yield rt


async def stream_ops(store, stream: str) -> list[tuple[int, str]]:
    return [(r.version, r.event.op_id) for r in await store.read_stream(stream)]


# -- commands -------------------------------------------------------------------


async def test_ask_appends_the_decided_events_and_returns_the_new_state(rt, store):
    account = await rt.get(ACCOUNT, "1")
    decision = await account.ask(Deposit(op_id="a", amount=5))
    assert decision.events == (Deposited(op_id="a", amount=5),)
    assert decision.state == State(1, AccountState(balance=5, ops=("a",)))
    assert decision.attempts == 1
    assert decision.position == await store.head()
    assert await stream_ops(store, "test-account-1") == [(1, "a")]


async def test_a_rejected_command_appends_nothing_and_the_actor_lives_on(rt, store):
    account = await rt.get(ACCOUNT, "1")
    with pytest.raises(InsufficientFunds):
        await account.ask(Withdraw(op_id="w", amount=1))
    assert account.alive
    assert await store.read_stream("test-account-1") == []
    assert (await account.ask(Deposit(op_id="a", amount=1))).state.version == 1


async def test_told_commands_are_applied_in_order(rt, store):
    account = await rt.get(ACCOUNT, "1")
    for n in range(10):
        await account.tell(Deposit(op_id=str(n), amount=1))
    state = await account.state()
    assert state == State(10, AccountState(balance=10, ops=tuple(map(str, range(10)))))


async def test_get_returns_the_running_actor_and_starts_it_only_once(rt):
    refs = []

    async def get() -> None:
        refs.append(await rt.get(ACCOUNT, "1"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(get)
    assert len({id(ref._cell) for ref in refs}) == 1
    assert await rt.get(ACCOUNT, "1") is refs[0]
    assert rt.find(ACCOUNT.address("1")) is refs[0]
    with pytest.raises(ActorAlreadyRunning):
        await rt.spawn(ACCOUNT, "1")


# -- rebuild and conflicts ---------------------------------------------------------


async def test_an_actor_is_rebuilt_from_its_stream_after_a_restart(tmp_path):
    path = tmp_path / "x.db"
    async with SQLiteEventStore.open(path) as store, ActorRuntime.open(store) as rt:
        account = await rt.get(ACCOUNT, "1")
        for n in range(3):
            await account.ask(Deposit(op_id=str(n), amount=10))
        await account.ask(Withdraw(op_id="w", amount=5))
        before = await account.state()
    assert not account.alive
    async with SQLiteEventStore.open(path) as store, ActorRuntime.open(store) as rt:
        assert rt.find(ACCOUNT.address("1")) is None
        account = await rt.get(ACCOUNT, "1")
        assert await account.state() == before == State(4, AccountState(25, ("0", "1", "2", "w")))
        decision = await account.ask(Withdraw(op_id="w2", amount=25))
        assert decision.state.version == 5


async def test_a_version_conflict_is_retried_on_the_caught_up_state(rt, store):
    account = await rt.get(ACCOUNT, "1")
    await account.ask(Deposit(op_id="a", amount=1))
    # Someone else appends behind the actor's back.
    await store.append("test-account-1", [Deposited(op_id="b", amount=2)], expected_version=1)
    decision = await account.ask(Withdraw(op_id="c", amount=3))  # needs "b" to be seen
    assert decision.attempts == 2
    assert decision.state == State(3, AccountState(balance=0, ops=("a", "b", "c")))
    assert await stream_ops(store, "test-account-1") == [(1, "a"), (2, "b"), (3, "c")]


async def test_conflicts_that_outlast_max_attempts_reach_the_asker(store):
    async with ActorRuntime.open(store, max_attempts=1) as rt:
        account = await rt.get(ACCOUNT, "1")
        await store.append("test-account-1", [Deposited(op_id="x", amount=1)])
        with pytest.raises(ConcurrencyError):
            await account.ask(Deposit(op_id="a", amount=1))
        assert account.alive  # it caught up and can go on
        assert (await account.ask(Deposit(op_id="a", amount=1))).state.version == 2


async def race(runtimes, stream_id: str, per_runtime: int) -> None:
    async def deposit(rt, op_id: str) -> None:
        account = await rt.get(ACCOUNT, stream_id)
        await account.ask(Deposit(op_id=op_id, amount=1))

    async with trio.open_nursery() as nursery:
        for n in range(per_runtime):
            for r, rt in enumerate(runtimes):
                nursery.start_soon(deposit, rt, f"r{r}-{n}")


async def test_two_runtimes_racing_on_one_stream_apply_each_command_once(store):
    async with (
        ActorRuntime.open(store, max_attempts=1000) as rt1,
        ActorRuntime.open(store, max_attempts=1000) as rt2,
    ):
        await race([rt1, rt2], "1", 25)
    ops = await stream_ops(store, "test-account-1")
    assert [version for version, _ in ops] == list(range(1, 51))
    assert sorted(op for _, op in ops) == sorted(f"r{r}-{n}" for r in (0, 1) for n in range(25))


async def test_two_stores_on_one_file_racing_apply_each_command_once(tmp_path):
    path = tmp_path / "x.db"
    async with (
        SQLiteEventStore.open(path) as store1,
        SQLiteEventStore.open(path) as store2,
        ActorRuntime.open(store1, max_attempts=1000) as rt1,
        ActorRuntime.open(store2, max_attempts=1000) as rt2,
    ):
        await race([rt1, rt2], "1", 15)
        ops = await stream_ops(store1, "test-account-1")
    assert [version for version, _ in ops] == list(range(1, 31))
    assert len({op for _, op in ops}) == 30


# -- failures and supervision ---------------------------------------------------


async def test_a_failing_top_level_actor_is_reported_and_can_be_rebuilt(store):
    reported = []
    async with ActorRuntime.open(store, on_failure=reported.append) as rt:
        account = await rt.get(ACCOUNT, "1")
        await account.ask(Deposit(op_id="a", amount=1))
        with pytest.raises(ActorFailed) as caught:
            await account.ask(Explode())
        assert isinstance(caught.value.__cause__, RuntimeError)
        exit = await account.join()
        assert exit.reason is ExitReason.FAILED and isinstance(exit.error, RuntimeError)
        assert reported == [exit] and list(rt.failures) == [exit]
        with pytest.raises(ActorStopped):
            await account.ask(Deposit(op_id="b", amount=1))
        again = await rt.get(ACCOUNT, "1")
        assert again is not account
        assert (await again.state()).value.balance == 1


async def test_a_failing_child_is_reported_to_its_parent(rt, store):
    parent = await rt.get(GUARDIAN, "p")
    child = await parent.spawn(ACCOUNT, "c")
    with pytest.raises(ActorFailed):
        await child.ask(Explode())
    assert (await child.join()).reason is ExitReason.FAILED
    state = await parent.state()
    assert state.value.lost == (("test-account-c", "failed"),)
    recorded = [r.event for r in await store.read_stream("test-guardian-p")]
    assert recorded == [ChildLost(child="test-account-c", reason="failed")]
    assert parent.alive
    assert not rt.failures  # handled by the parent, not escalated


async def test_an_unhandled_child_failure_fails_the_parent_and_its_other_children(rt):
    parent = await rt.get(ACCOUNT, "p")
    doomed = await parent.spawn(ACCOUNT, "doomed")
    sibling = await parent.spawn(ACCOUNT, "sibling")
    with pytest.raises(ActorFailed):
        await doomed.ask(Explode())
    exit = await parent.join()
    assert exit.reason is ExitReason.FAILED
    assert isinstance(exit.error, ChildFailed)
    assert exit.error.exit.address.stream == "test-account-doomed"
    assert (await sibling.join()).reason is ExitReason.CANCELLED
    assert list(rt.failures) == [exit]


async def test_stopping_a_parent_cancels_its_children(rt, store):
    parent = await rt.get(GUARDIAN, "p")
    child = await parent.spawn(GUARDIAN, "c")
    grandchild = await child.spawn(ACCOUNT, "g")
    await grandchild.ask(Deposit(op_id="a", amount=1))
    assert (await parent.stop()).reason is ExitReason.STOPPED
    assert not child.alive and not grandchild.alive
    assert (await child.join()).reason is ExitReason.CANCELLED
    assert (await grandchild.join()).reason is ExitReason.CANCELLED
    with pytest.raises(ActorStopped):
        await grandchild.ask(Deposit(op_id="b", amount=1))
    with pytest.raises(ActorStopped):
        await parent.spawn(ACCOUNT, "late")
    # Cancelled with its parent, it was not "lost": nothing recorded anywhere.
    assert await store.read_stream("test-guardian-p") == []
    assert not rt.failures
    assert (await (await rt.get(ACCOUNT, "g")).state()).version == 1


async def test_a_stopped_child_is_reported_as_stopped(rt):
    parent = await rt.get(GUARDIAN, "p")
    child = await parent.spawn(ACCOUNT, "c")
    assert (await child.stop()).reason is ExitReason.STOPPED
    assert (await parent.state()).value.lost == (("test-account-c", "stopped"),)


async def test_asks_pending_when_an_actor_stops_never_hang(rt):
    account = await rt.get(ACCOUNT, "1")
    outcomes = []

    async def ask(n: int) -> None:
        try:
            outcomes.append(await account.ask(Deposit(op_id=str(n), amount=1)))
        except ActorStopped as exc:
            outcomes.append(exc)

    async with trio.open_nursery() as nursery:
        for n in range(20):
            nursery.start_soon(ask, n)
        await trio.sleep(0)
        await account.stop()
    assert len(outcomes) == 20
    assert any(isinstance(o, ActorStopped) for o in outcomes)


# -- deadlines ----------------------------------------------------------------------


async def test_a_child_past_its_deadline_stops_and_is_reported_as_timed_out(rt, autojump_clock):
    parent = await rt.get(GUARDIAN, "p")
    start = trio.current_time()
    child = await parent.spawn(ACCOUNT, "c", timeout=30)
    exit = await child.join()
    assert exit.reason is ExitReason.TIMED_OUT
    assert trio.current_time() >= start + 30
    assert (await parent.state()).value.lost == (("test-account-c", "timed_out"),)
    assert parent.alive


async def test_a_top_level_actor_past_its_deadline_is_a_reported_failure(rt, autojump_clock):
    account = await rt.spawn(ACCOUNT, "1", timeout=5)
    exit = await account.join()
    assert exit.reason is ExitReason.TIMED_OUT
    assert list(rt.failures) == [exit]


async def test_a_parent_deadline_ends_its_children_too(rt, autojump_clock):
    parent = await rt.spawn(ACCOUNT, "p", timeout=10)
    child = await parent.spawn(ACCOUNT, "c")  # no deadline of its own
    assert (await child.join()).reason is ExitReason.CANCELLED
    assert (await parent.join()).reason is ExitReason.TIMED_OUT


# -- the runtime's lifetime -----------------------------------------------------------


async def test_closing_the_runtime_stops_every_actor(store):
    async with ActorRuntime.open(store) as rt:
        parent = await rt.get(GUARDIAN, "p")
        child = await parent.spawn(ACCOUNT, "c")
    assert not parent.alive and not child.alive
    assert (await parent.join()).reason is ExitReason.CANCELLED
    with pytest.raises(ActorStopped):
        await parent.ask(Deposit(op_id="a", amount=1))
    with pytest.raises(RuntimeClosed):
        await rt.get(ACCOUNT, "1")
    assert not rt.failures


async def test_an_error_in_the_runtime_block_comes_out_as_itself(store):
    with pytest.raises(KeyError):
        async with ActorRuntime.open(store) as rt:
            await rt.get(ACCOUNT, "1")
            raise KeyError("mine")


async def test_a_stream_that_cannot_be_folded_fails_the_get_itself(rt, store):
    class Corrupt(Account):
        def evolve(self, state, event):
            raise ValueError("cannot fold this")

    await store.append("test-account-1", [Deposited(op_id="a", amount=1)])
    with pytest.raises(ValueError, match="cannot fold"):
        await rt.get(Corrupt(), "1")
    assert rt.find(ACCOUNT.address("1")) is None
    assert (await (await rt.get(ACCOUNT, "1")).state()).version == 1


async def test_a_kind_runs_one_behavior(rt):
    class Impostor(Account):
        pass

    await rt.get(ACCOUNT, "1")
    with pytest.raises(TypeError):
        await rt.get(Impostor(), "1")
