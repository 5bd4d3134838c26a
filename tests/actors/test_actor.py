"""The one actor model: fold, decide and step, pure, with no trio and no store;
and the job, cron and run actors as instances of it."""

from __future__ import annotations

import pytest
from actor_examples import (
    ACCOUNT,
    AccountState,
    Deposit,
    Deposited,
    InsufficientFunds,
    Ledger,
    Withdraw,
    Withdrew,
    decide_ledger,
    evolve_ledger,
)
from hypothesis import given
from hypothesis import strategies as st

from gormes.actors import Behavior, State, fold, step, struct_version
from gormes.actors.cron.actor import CRON
from gormes.actors.cron.rules import Add, Pause
from gormes.actors.jobs import rules
from gormes.actors.jobs.actor import JOB
from gormes.actors.runs.actor import RUN
from gormes.events import UnknownEvent
from gormes.events.cron import cron_stream
from gormes.events.jobs import job_stream
from gormes.events.notes import NoteAdded
from gormes.events.runs import run_stream

LEDGER = Behavior(
    kind="test-ledger", initial=None, evolve=evolve_ledger, decide=decide_ledger,
    with_version=struct_version,
)


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


def test_a_rejected_command_is_the_kinds_typed_error():
    with pytest.raises(InsufficientFunds, match="balance 0 < 1"):
        step(ACCOUNT, State.empty(ACCOUNT), Withdraw(op_id="a", amount=1))


def test_stream_name_is_kind_dash_id():
    assert ACCOUNT.stream("42") == "test-account-42"


def test_a_state_that_carries_its_version_gets_it_from_fold():
    assert fold(LEDGER, []) == State(0, None)
    state = fold(LEDGER, [NoteAdded(text="x"), Deposited(op_id="a", amount=2)])
    assert state == State(2, Ledger(balance=2, version=2))
    _, after = step(LEDGER, state, Deposit(op_id="b", amount=1))
    assert after == State(3, Ledger(balance=3, version=3))
    # nothing folded: the state is handed back as it is
    assert fold(LEDGER, [], State(7, Ledger(balance=1, version=7))).value.version == 7


def test_the_job_cron_and_run_actors_are_behaviors_on_their_streams():
    assert JOB.stream("01J") == job_stream("01J")
    assert CRON.stream("nightly") == cron_stream("nightly")
    assert RUN.stream("01R") == run_stream("01R")
    for kind in (JOB, CRON, RUN):
        assert isinstance(kind, Behavior) and kind.initial is None


def test_a_job_folds_with_its_stream_version():
    submit = rules.Submit(now=1, job_id="J1", name="echo")
    events, state = step(JOB, State.empty(JOB), submit)
    assert state.version == 1 and state.value is not None and state.value.version == 1
    claim = rules.Claim(now=2, worker_id="w", lock_token="t", lease_ms=1000)
    more, state = step(JOB, state, claim)
    assert fold(JOB, [*events, *more]) == state
    assert state.value.status == "active" and state.value.version == 2


def test_a_schedule_folds_with_its_stream_version():
    events, state = step(CRON, State.empty(CRON), Add(name="n", schedule="@daily", job="echo", at=1))
    paused, state = step(CRON, state, Pause("n", 2))
    assert fold(CRON, [*events, *paused]) == state
    assert state.value is not None and state.value.status == "paused" and state.value.version == 2


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
