"""The actor runtime against a real store (SQLite, then PostgreSQL): a command is
folded, decided and appended at the version read, in one transaction."""

from __future__ import annotations

import pytest
import trio
from actor_examples import ACCOUNT, AccountState, Deposit, Deposited, InsufficientFunds, Withdraw
from pg_helpers import backend, store_on_both_backends  # noqa: F401 (fixtures: `store` on SQLite and PostgreSQL)

from gormes.actors import Behavior, State, ask, execute, load, read
from gormes.errors import ConcurrencyError


async def ops(store, stream: str) -> list[tuple[int, str]]:
    return [(r.version, r.event.op_id) for r in await store.read_stream(stream)]


async def test_ask_appends_the_decided_events_and_returns_the_new_state(store):
    events, state = await ask(store, ACCOUNT, "1", Deposit(op_id="a", amount=5))
    assert events == (Deposited(op_id="a", amount=5),)
    assert state == State(1, AccountState(balance=5, ops=("a",)))
    assert await ops(store, "test-account-1") == [(1, "a")]
    assert await read(store, ACCOUNT, "1") == state


async def test_a_rejected_command_appends_nothing(store):
    await ask(store, ACCOUNT, "1", Deposit(op_id="a", amount=1))
    head = await store.head()
    with pytest.raises(InsufficientFunds):
        await ask(store, ACCOUNT, "1", Withdraw(op_id="w", amount=2))
    assert await store.head() == head
    assert await ops(store, "test-account-1") == [(1, "a")]


async def test_each_command_decides_on_what_the_stream_holds_when_it_runs(store):
    # Concurrent askers on one account: each decision sees every earlier one, so
    # exactly the withdrawals the balance covers go through, and no version clashes.
    await ask(store, ACCOUNT, "1", Deposit(op_id="d", amount=3))
    refused = []

    async def withdraw(n: int) -> None:
        try:
            await ask(store, ACCOUNT, "1", Withdraw(op_id=f"w{n}", amount=1))
        except InsufficientFunds:
            refused.append(n)

    async with trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(withdraw, n)
    state = await read(store, ACCOUNT, "1")
    assert state.value.balance == 0 and state.version == 4
    assert len(refused) == 2
    assert [v for v, _ in await ops(store, "test-account-1")] == [1, 2, 3, 4]


async def test_commands_in_one_transaction_share_the_state_folded_in_it(store):
    def two(tx):
        _, first = execute(tx, ACCOUNT, "1", Deposit(op_id="a", amount=2))
        _, second = execute(tx, ACCOUNT, "1", Withdraw(op_id="b", amount=2), first)
        return first, second, load(tx, ACCOUNT, "1")

    first, second, loaded = await store.transact(two)
    assert first.version == 1 and second == loaded == State(2, AccountState(0, ("a", "b")))


async def test_a_stale_state_handed_in_conflicts_and_writes_nothing(store):
    await ask(store, ACCOUNT, "1", Deposit(op_id="a", amount=1))
    with pytest.raises(ConcurrencyError):
        await store.transact(
            lambda tx: execute(tx, ACCOUNT, "1", Deposit(op_id="b", amount=1), State.empty(ACCOUNT))
        )
    assert await ops(store, "test-account-1") == [(1, "a")]


async def test_a_command_that_decides_nothing_appends_nothing(store):
    quiet = Behavior(kind="test-quiet", initial=0, evolve=lambda s, e: s + 1, decide=lambda s, c: [])
    head = await store.head()
    events, state = await ask(store, quiet, "1", "anything")
    assert events == () and state == State(0, 0)
    assert await store.head() == head
