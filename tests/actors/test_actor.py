"""The pure half of actors: fold, decide and step, with no trio and no store."""

from __future__ import annotations

import pytest
from actor_examples import (
    Account,
    AccountState,
    Deposit,
    Deposited,
    Guardian,
    InsufficientFunds,
    Withdraw,
    Withdrew,
)
from hypothesis import given
from hypothesis import strategies as st

from gormes.actors import (
    ActorExit,
    Address,
    ChildFailed,
    CommandRejected,
    ExitReason,
    State,
    fold,
    step,
)
from gormes.events import UnknownEvent
from gormes.events.notes import NoteAdded

ACCOUNT = Account()


def test_empty_fold_is_the_initial_state_at_version_zero():
    assert fold(ACCOUNT, []) == State(0, AccountState())
    assert State.empty(ACCOUNT) == State(0, AccountState())


def test_fold_counts_versions_and_evolves_in_order():
    events = [
        Deposited(op_id="a", amount=10),
        Withdrew(op_id="b", amount=3),
        Deposited(op_id="c", amount=1),
    ]
    state = fold(ACCOUNT, events)
    assert state.version == 3
    assert state.value == AccountState(balance=8, ops=("a", "b", "c"))


def test_fold_continues_from_a_given_state():
    first = fold(ACCOUNT, [Deposited(op_id="a", amount=5)])
    assert fold(ACCOUNT, [Deposited(op_id="b", amount=2)], first) == State(
        2, AccountState(balance=7, ops=("a", "b"))
    )


def test_events_the_behavior_does_not_know_count_but_change_nothing():
    events = [
        Deposited(op_id="a", amount=5),
        NoteAdded(text="operator was here"),
        UnknownEvent(type="from.the.future", data={"x": 1}),
    ]
    assert fold(ACCOUNT, events) == State(3, AccountState(balance=5, ops=("a",)))


def test_step_decides_then_evolves():
    events, state = step(ACCOUNT, State.empty(ACCOUNT), Deposit(op_id="a", amount=4))
    assert events == (Deposited(op_id="a", amount=4),)
    assert state == State(1, AccountState(balance=4, ops=("a",)))


def test_a_rejected_command_is_a_typed_error():
    with pytest.raises(InsufficientFunds) as caught:
        step(ACCOUNT, State.empty(ACCOUNT), Withdraw(op_id="a", amount=1))
    assert isinstance(caught.value, CommandRejected)


def test_stream_name_is_kind_dash_id():
    assert ACCOUNT.address("42") == Address("test-account", "42")
    assert ACCOUNT.address("42").stream == "test-account-42"
    assert Guardian().address("x").stream == "test-guardian-x"


def test_default_child_exit_policy_ignores_stops_and_escalates_failures():
    child = Address("test-account", "c")
    assert ACCOUNT.on_child_exit(AccountState(), ActorExit(child, ExitReason.STOPPED)) == ()
    assert ACCOUNT.on_child_exit(AccountState(), ActorExit(child, ExitReason.CANCELLED)) == ()
    for reason in (ExitReason.FAILED, ExitReason.TIMED_OUT):
        exit = ActorExit(child, reason, RuntimeError("x") if reason is ExitReason.FAILED else None)
        with pytest.raises(ChildFailed) as caught:
            ACCOUNT.on_child_exit(AccountState(), exit)
        assert caught.value.exit is exit
        assert "test-account-c" in str(caught.value)


commands = st.lists(
    st.builds(
        lambda kind, n, amount: (Deposit if kind else Withdraw)(op_id=str(n), amount=amount),
        st.booleans(),
        st.integers(0, 1000),
        st.integers(0, 50),
    ),
    max_size=30,
)


@given(commands)
def test_stepping_command_by_command_equals_folding_all_their_events(cmds):
    state = State.empty(ACCOUNT)
    appended = []
    for command in cmds:
        try:
            events, state = step(ACCOUNT, state, command)
        except InsufficientFunds:
            continue
        appended.extend(events)
    assert fold(ACCOUNT, appended) == state
    assert state.version == len(appended)
    assert state.value.balance >= 0


@given(commands, st.integers(0, 30))
def test_folding_in_two_parts_equals_folding_at_once(cmds, cut):
    events = [
        Deposited(op_id=c.op_id, amount=c.amount)
        if isinstance(c, Deposit)
        else Withdrew(op_id=c.op_id, amount=c.amount)
        for c in cmds
    ]
    assert fold(ACCOUNT, events[cut:], fold(ACCOUNT, events[:cut])) == fold(ACCOUNT, events)
