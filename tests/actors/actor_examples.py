"""An example actor for the actor-model tests: a bank account that refuses to
go below zero."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gormes.actors.actor import Behavior
from gormes.errors import UserError
from gormes.events import Event, UnknownEvent


class Deposited(Event, tag="test.actor.deposited"):
    op_id: str
    amount: int


class Withdrew(Event, tag="test.actor.withdrew"):
    op_id: str
    amount: int


class Deposit(msgspec.Struct, frozen=True):
    op_id: str
    amount: int


class Withdraw(msgspec.Struct, frozen=True):
    op_id: str
    amount: int


Command = Deposit | Withdraw


class AccountState(msgspec.Struct, frozen=True):
    balance: int = 0
    ops: tuple[str, ...] = ()


class InsufficientFunds(UserError):
    pass


def evolve(state: AccountState, event: Event | UnknownEvent) -> AccountState:
    match event:
        case Deposited(op_id=op_id, amount=amount):
            return AccountState(state.balance + amount, (*state.ops, op_id))
        case Withdrew(op_id=op_id, amount=amount):
            return AccountState(state.balance - amount, (*state.ops, op_id))
    return state


def decide(state: AccountState, command: Command) -> Sequence[Event]:
    match command:
        case Deposit(op_id=op_id, amount=amount):
            return [Deposited(op_id=op_id, amount=amount)]
        case Withdraw(op_id=op_id, amount=amount):
            if amount > state.balance:
                raise InsufficientFunds(f"balance {state.balance} < {amount}")
            return [Withdrew(op_id=op_id, amount=amount)]
    raise TypeError(f"not an account command: {command!r}")


ACCOUNT: Behavior[AccountState, Command] = Behavior(
    kind="test-account", initial=AccountState(), evolve=evolve, decide=decide,
)


class Ledger(msgspec.Struct, frozen=True):
    """An account state that carries its own stream version, like a job's."""

    balance: int = 0
    version: int = 0


def evolve_ledger(state: Ledger | None, event: Event | UnknownEvent) -> Ledger | None:
    if isinstance(event, Deposited):
        return Ledger((state.balance if state else 0) + event.amount, state.version if state else 0)
    return state


def decide_ledger(state: Ledger | None, command: Deposit) -> Sequence[Event]:
    return [Deposited(op_id=command.op_id, amount=command.amount)]
