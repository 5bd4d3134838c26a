"""The actor runtime: one trio task per in-memory actor, supervised by structure.

Each actor is a task with a mailbox (a bounded trio memory channel) that it
serves one message at a time. Asked a command, it decides, appends with
`expected_version = state.version` and evolves; on a `ConcurrencyError` it reads
what others appended, folds it in and decides again (up to `max_attempts`).

Supervision is the nursery tree. A child lives in its parent's nursery, inside
the parent's cancel scope: stopping (or failing) a parent cancels its children.
Each actor runs in a cancel scope of its own, carrying its deadline. When a child
ends on its own (stopped, failed, timed out) an `ActorExit` lands in the parent's
mailbox and goes through the parent behavior's pure `on_child_exit`. A top-level
actor's abnormal exit goes to the runtime: logged, kept in `failures`, and given
to `on_failure` if one was passed.

    async with ActorRuntime.open(store) as rt:
        account = await rt.get(Account(), "42")
        decision = await account.ask(Deposit(amount=5))
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import trio

from gormes.actors.actor import (
    ActorAlreadyRunning,
    ActorExit,
    ActorFailed,
    ActorStopped,
    Address,
    Behavior,
    CommandRejected,
    Decision,
    ExitReason,
    RuntimeClosed,
    State,
    fold,
)
from gormes.errors import ConcurrencyError
from gormes.events.base import Event
from gormes.events.store import EventStore

S = TypeVar("S")
C = TypeVar("C")
S2 = TypeVar("S2")
C2 = TypeVar("C2")

log = logging.getLogger("gormes.actors")


class _Reply:
    """Where an actor puts its answer to one `ask`; the first answer wins."""

    __slots__ = ("_done", "_value", "_error")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def resolve(self, value: Any) -> None:
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()

    async def wait(self) -> Any:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


@dataclass(slots=True)
class _Command:
    command: Any
    reply: _Reply | None  # None for `tell`


@dataclass(slots=True)
class _ReadState:
    reply: _Reply


class ActorRef(Generic[S, C]):
    """A handle on a running actor. It goes stale when the actor ends: get a new one."""

    __slots__ = ("_cell",)

    def __init__(self, cell: _Cell[S, C]) -> None:
        self._cell = cell

    def __repr__(self) -> str:
        return f"<ActorRef {self.address.stream}{'' if self.alive else ' (ended)'}>"

    @property
    def address(self) -> Address:
        return self._cell.address

    @property
    def alive(self) -> bool:
        return self._cell.accepting

    @property
    def exit(self) -> ActorExit | None:
        return self._cell.exit

    async def ask(self, command: C) -> Decision[S]:
        """Decide, append and evolve; raises `CommandRejected`, `ConcurrencyError`
        (retries exhausted), `ActorFailed` (the command broke the actor) or
        `ActorStopped`."""
        reply = _Reply()
        await self._cell.post(_Command(command, reply))
        return await reply.wait()

    async def tell(self, command: C) -> None:
        """Queue a command without waiting for it (only for mailbox room)."""
        await self._cell.post(_Command(command, None))

    async def state(self) -> State[S]:
        """The state after every earlier message, caught up with the stream."""
        reply = _Reply()
        await self._cell.post(_ReadState(reply))
        return await reply.wait()

    async def spawn(
        self, behavior: Behavior[S2, C2], actor_id: str, *, timeout: float | None = None
    ) -> ActorRef[S2, C2]:
        """Start a child in this actor's nursery, ended after `timeout` seconds if given."""
        return await self._cell.runtime._spawn(behavior, actor_id, self._cell, timeout)

    async def stop(self) -> ActorExit:
        """Cancel the actor (and its children) and wait until it has ended."""
        cell = self._cell
        cell.stop_requested = True
        cell.scope.cancel()
        await cell.finished.wait()
        assert cell.exit is not None
        return cell.exit

    async def join(self) -> ActorExit:
        """Wait until the actor ends, for whatever reason."""
        await self._cell.finished.wait()
        assert self._cell.exit is not None
        return self._cell.exit


class _Cell(Generic[S, C]):
    """One actor's task: its state, mailbox, cancel scope and children's nursery."""

    def __init__(
        self,
        runtime: ActorRuntime,
        behavior: Behavior[S, C],
        address: Address,
        parent: _Cell[Any, Any] | None,
        deadline: float,
    ) -> None:
        self.runtime = runtime
        self.behavior = behavior
        self.address = address
        self.parent = parent
        self.state: State[S] = State.empty(behavior)
        self._send, self._inbox = trio.open_memory_channel[Any](runtime.mailbox_size)
        self.scope = trio.CancelScope(deadline=deadline)
        self.children: trio.Nursery | None = None
        self.started = trio.Event()
        self.finished = trio.Event()
        self.accepting = True
        self.stop_requested = False
        self.exit: ActorExit | None = None
        self._failure: Exception | None = None
        self._current: _Reply | None = None
        self.ref: ActorRef[S, C] = ActorRef(self)

    async def post(self, message: Any) -> None:
        if self.accepting:
            try:
                await self._send.send(message)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        raise ActorStopped(self.address, self.exit)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        records = await self.runtime.store.read_stream(self.address.stream)
        self.state = fold(self.behavior, (r.event for r in records))
        task_status.started()
        self.started.set()
        ended_here = False
        try:
            # The deadline applies from spawn on, but only once the actor is up:
            # a rebuild cut short would leave its spawner with nothing.
            with self.scope:
                async with trio.open_nursery() as children:
                    self.children = children
                    await self._serve()
                    self.accepting = False
                    children.cancel_scope.cancel()
            ended_here = True
        finally:
            self._finish(ended_here)

    async def _serve(self) -> None:
        async for message in self._inbox:
            try:
                await self._handle(message)
            except Exception as exc:  # noqa: BLE001 - a failure ends the actor and is reported
                self._failure = exc
                return

    async def _handle(self, message: Any) -> None:
        if isinstance(message, _ReadState):
            await self._catch_up()
            message.reply.resolve(self.state)
        elif isinstance(message, ActorExit):
            await self._commit(lambda value: self.behavior.on_child_exit(value, message))
        else:
            reply = self._current = message.reply
            try:
                decision = await self._commit(
                    lambda value: self.behavior.decide(value, message.command)
                )
            except (CommandRejected, ConcurrencyError) as exc:
                if reply is None:
                    log.warning("%s: told command dropped: %s", self.address.stream, exc)
                else:
                    reply.fail(exc)
            except Exception as exc:
                if reply is not None:
                    exit = ActorExit(self.address, ExitReason.FAILED, exc)
                    failed = ActorFailed(self.address, exit)
                    failed.__cause__ = exc
                    reply.fail(failed)
                raise
            else:
                if reply is not None:
                    reply.resolve(decision)
            self._current = None

    async def _commit(self, produce: Callable[[S], Sequence[Event]]) -> Decision[S]:
        store, stream = self.runtime.store, self.address.stream
        attempts = self.runtime.max_attempts
        for attempt in range(1, attempts + 1):
            try:
                events = tuple(produce(self.state.value))
            except CommandRejected:
                # Refuse only on the stream as it is: others may have appended.
                seen = self.state.version
                await self._catch_up()
                if self.state.version == seen or attempt == attempts:
                    raise
                continue
            if not events:
                return Decision((), self.state, None, attempt)
            try:
                result = await store.append(stream, events, expected_version=self.state.version)
            except ConcurrencyError:
                await self._catch_up()
                if attempt == attempts:
                    raise
                continue
            self.state = fold(self.behavior, events, self.state)
            return Decision(events, self.state, result.last_position, attempt)
        raise AssertionError("max_attempts must be at least 1")

    async def _catch_up(self) -> None:
        records = await self.runtime.store.read_stream(self.address.stream, self.state.version)
        self.state = fold(self.behavior, (r.event for r in records), self.state)

    def _finish(self, ended_here: bool) -> None:
        """Runs however the actor ended, even while a cancellation goes through it."""
        self.accepting = False
        if self._failure is not None:
            reason = ExitReason.FAILED
        elif self.scope.cancelled_caught and not self.stop_requested:
            reason = ExitReason.TIMED_OUT
        elif ended_here:
            reason = ExitReason.STOPPED
        else:
            reason = ExitReason.CANCELLED
        self.exit = ActorExit(self.address, reason, self._failure)
        pending = [self._current] if self._current is not None else []
        while True:
            try:
                message = self._inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if getattr(message, "reply", None) is not None:
                pending.append(message.reply)
        for reply in pending:
            reply.fail(ActorStopped(self.address, self.exit))
        self._inbox.close()
        self._send.close()
        self.runtime._forget(self)
        self._report(self.exit)
        self.finished.set()

    def _report(self, exit: ActorExit) -> None:
        parent = self.parent
        if parent is None:
            self.runtime._top_level_exit(exit)
        elif parent.accepting and parent.children is not None:
            try:
                parent._send.send_nowait(exit)
            except trio.WouldBlock:
                parent.children.start_soon(parent._deliver, exit)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _deliver(self, exit: ActorExit) -> None:
        try:
            await self._send.send(exit)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


class ActorRuntime:
    """Runs actors over an `EventStore`. Open it with `async with ActorRuntime.open(store)`."""

    def __init__(
        self,
        store: EventStore,
        nursery: trio.Nursery,
        *,
        max_attempts: int = 10,
        mailbox_size: int = 64,
        on_failure: Callable[[ActorExit], None] | None = None,
        keep_failures: int = 1000,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.store = store
        self.max_attempts = max_attempts
        self.mailbox_size = mailbox_size
        self.on_failure = on_failure
        self.failures: deque[ActorExit] = deque(maxlen=keep_failures)
        self._nursery = nursery
        self._cells: dict[str, _Cell[Any, Any]] = {}
        self._closed = False

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        store: EventStore,
        *,
        max_attempts: int = 10,
        mailbox_size: int = 64,
        on_failure: Callable[[ActorExit], None] | None = None,
    ) -> AsyncIterator[ActorRuntime]:
        """Run actors until the block ends; then every actor still running is cancelled.

        `max_attempts` bounds the decide-append tries of one command under version
        conflicts; `on_failure` hears of every top-level actor that failed or timed
        out (if it raises, the runtime fails with it).
        """
        body_error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            runtime = cls(
                store,
                nursery,
                max_attempts=max_attempts,
                mailbox_size=mailbox_size,
                on_failure=on_failure,
            )
            try:
                yield runtime
            except BaseException as exc:
                # Re-raised outside the nursery, so the caller gets it unwrapped.
                body_error = exc
            finally:
                runtime._closed = True
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error

    async def get(self, behavior: Behavior[S, C], actor_id: str) -> ActorRef[S, C]:
        """The running actor for this id, or a new top-level one rebuilt from its stream."""
        address = behavior.address(actor_id)
        while True:
            cell = self._cells.get(address.stream)
            if cell is None:
                return await self._spawn(behavior, actor_id, None, None)
            if type(cell.behavior) is not type(behavior):
                raise TypeError(
                    f"{address.stream} runs {type(cell.behavior).__name__}, "
                    f"not {type(behavior).__name__}"
                )
            await cell.started.wait()
            if cell.accepting:
                return cell.ref

    async def spawn(
        self, behavior: Behavior[S, C], actor_id: str, *, timeout: float | None = None
    ) -> ActorRef[S, C]:
        """Start a top-level actor, ended after `timeout` seconds if given."""
        return await self._spawn(behavior, actor_id, None, timeout)

    def find(self, address: Address) -> ActorRef[Any, Any] | None:
        """The actor at `address` if it is in memory, without starting it."""
        cell = self._cells.get(address.stream)
        return cell.ref if cell is not None and cell.accepting else None

    async def _spawn(
        self,
        behavior: Behavior[S, C],
        actor_id: str,
        parent: _Cell[Any, Any] | None,
        timeout: float | None,
    ) -> ActorRef[S, C]:
        if self._closed:
            raise RuntimeClosed("the actor runtime is closed")
        address = behavior.address(actor_id)
        if address.stream in self._cells:
            raise ActorAlreadyRunning(f"actor {address.stream} is already running")
        if parent is None:
            nursery = self._nursery
        elif parent.accepting and parent.children is not None:
            nursery = parent.children
        else:
            raise ActorStopped(parent.address, parent.exit)
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        cell = _Cell(self, behavior, address, parent, deadline)
        self._cells[address.stream] = cell
        try:
            await nursery.start(cell.run)
        except BaseException as exc:
            # Never started (its stream could not be read, or its parent ended).
            error = exc if isinstance(exc, Exception) else None
            cell.accepting = False
            cell.exit = ActorExit(address, ExitReason.FAILED, error)
            self._forget(cell)
            cell.started.set()
            cell.finished.set()
            raise
        return cell.ref

    def _forget(self, cell: _Cell[Any, Any]) -> None:
        if self._cells.get(cell.address.stream) is cell:
            del self._cells[cell.address.stream]

    def _top_level_exit(self, exit: ActorExit) -> None:
        if not exit.abnormal:
            return
        self.failures.append(exit)
        log.error("actor %s %s", exit.address.stream, exit.reason.value, exc_info=exit.error)
        if self.on_failure is not None:
            self.on_failure(exit)
