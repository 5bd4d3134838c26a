"""Example behaviors for the actor tests: a bank account and a guardian that
records its children's exits instead of failing with them."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gormes.actors import ActorExit, Behavior, CommandRejected
from gormes.events import Event, UnknownEvent


class Deposited(Event, tag="test.actor.deposited"):
    op_id: str
    amount: int


class Withdrew(Event, tag="test.actor.withdrew"):
    op_id: str
    amount: int


class ChildLost(Event, tag="test.actor.child_lost"):
    child: str
    reason: str


class Deposit(msgspec.Struct, frozen=True):
    op_id: str
    amount: int


class Withdraw(msgspec.Struct, frozen=True):
    op_id: str
    amount: int


class Explode(msgspec.Struct, frozen=True):
    """A command the account's decide cannot handle: a bug, so the actor fails."""


Command = Deposit | Withdraw | Explode


class AccountState(msgspec.Struct, frozen=True):
    balance: int = 0
    ops: tuple[str, ...] = ()
    lost: tuple[tuple[str, str], ...] = ()


class InsufficientFunds(CommandRejected):
    pass


class Account(Behavior[AccountState, Command]):
    kind = "test-account"

    def initial(self) -> AccountState:
        return AccountState()

    def evolve(self, state: AccountState, event: Event | UnknownEvent) -> AccountState:
        match event:
            case Deposited(op_id=op_id, amount=amount):
                return msgspec.structs.replace(
                    state, balance=state.balance + amount, ops=(*state.ops, op_id)
                )
            case Withdrew(op_id=op_id, amount=amount):
                return msgspec.structs.replace(
                    state, balance=state.balance - amount, ops=(*state.ops, op_id)
                )
            case ChildLost(child=child, reason=reason):
                return msgspec.structs.replace(state, lost=(*state.lost, (child, reason)))
        return state

    def decide(self, state: AccountState, command: Command) -> Sequence[Event]:
        match command:
            case Deposit(op_id=op_id, amount=amount):
                return [Deposited(op_id=op_id, amount=amount)]
            case Withdraw(op_id=op_id, amount=amount):
                if amount > state.balance:
                    raise InsufficientFunds(f"balance {state.balance} < {amount}")
                return [Withdrew(op_id=op_id, amount=amount)]
        raise RuntimeError(f"boom: {command!r}")


class Guardian(Account):
    """An account that, as a parent, records a lost child and carries on."""

    kind = "test-guardian"

    def on_child_exit(self, state: AccountState, exit: ActorExit) -> Sequence[Event]:
        return [ChildLost(child=exit.address.stream, reason=exit.reason.value)]
