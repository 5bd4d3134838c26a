"""The run actor (RUN): its fold, and what others ask of a run (a message, a
cut-off end), pure and then through the store."""

from __future__ import annotations

import pytest

from gormes.actors import State, ask, fold, read, step
from gormes.actors.runs.actor import RUN, CutOff, RunLife, RunNotFound, SendMessage
from gormes.actors.runs.manager import send_message
from gormes.events.base import UnknownEvent
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    RunCancelled, RunChildFinished, RunChildSpawned, RunCompleted, RunMessageSent, RunStarted,
    RunTokensAdded, run_stream,
)

STARTED = RunStarted(run_id="R1", handler="h", handler_version="v")


def message(run_id: str = "R1") -> SendMessage:
    return SendMessage(run_id=run_id, message_id="M1", sender="operator", payload="hi", sent_at=5)


def test_a_run_folds_its_tokens_and_children():
    state = fold(RUN, [
        STARTED,
        RunTokensAdded(seq=1, input=3, output=1),
        RunChildSpawned(seq=2, child_run_id="C1", handler="h"),
        RunChildFinished(seq=3, child_run_id="C1", status="completed", tokens=Tokens(input=10)),
    ])
    assert state == State(4, RunLife(started=STARTED, tokens=Tokens(input=13, output=1), children=("C1",)))


def test_a_message_is_refused_for_no_run_and_for_an_ended_one():
    with pytest.raises(RunNotFound, match="no run with id 'R1'"):
        step(RUN, fold(RUN, []), message())
    ended = fold(RUN, [STARTED, RunCompleted(result=1)])
    with pytest.raises(RunNotFound, match="run R1 has ended"):
        step(RUN, ended, message())
    # an end written by a newer gormes is an end too
    with pytest.raises(RunNotFound, match="has ended"):
        step(RUN, fold(RUN, [STARTED, UnknownEvent(type="run.failed", data={})]), message())
    events, _ = step(RUN, fold(RUN, [STARTED]), message())
    assert events == (RunMessageSent(message_id="M1", sender="operator", payload="hi", sent_at=5),)


def test_a_cut_off_ends_a_run_once_with_its_tokens():
    running = fold(RUN, [STARTED, RunTokensAdded(seq=1, input=2)])
    events, ended = step(RUN, running, CutOff(reason="lost"))
    assert events == (RunCancelled(reason="lost", tokens=Tokens(input=2)),)
    assert step(RUN, ended, CutOff(reason="again"))[0] == ()
    assert step(RUN, fold(RUN, []), CutOff(reason="no run"))[0] == ()


async def test_send_message_goes_through_the_run_actor(store):
    await store.append(run_stream("R1"), [STARTED])
    with pytest.raises(RunNotFound):
        await send_message(store, "R2", "hi")
    message_id = await send_message(store, "R1", "hi", clock=lambda: 1.0, ids=lambda: "M1")
    assert message_id == "M1"
    [_, sent] = await store.read_stream(run_stream("R1"))
    assert sent.event == RunMessageSent(message_id="M1", sender="operator", payload="hi", sent_at=1000)
    await ask(store, RUN, "R1", CutOff(reason="lost"))
    assert (await read(store, RUN, "R1")).value.ended
    with pytest.raises(RunNotFound, match="has ended"):
        await send_message(store, "R1", "too late")
