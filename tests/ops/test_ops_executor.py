"""The executor: trust checked before the handler, input validated, timeout
enforced, and every call (allowed or not) audited in the real SQLite log."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
import trio
import trio.lowlevel

from ops_helpers import EchoInput, EchoOutput, audit_events
from gormes.events.audit import audit_stream
from gormes.ops.executor import Executor
from gormes.ops.spec import (
    Caller, InvalidOperationInput, OperationDenied, OperationTimeout, UnknownOperation,
)

OPERATOR = Caller(trust="operator", id="cli")
GATEWAY = Caller(trust="gateway", id="gw-telegram")
CHILD = Caller(trust="child-agent", id="run-child", run_id="run-child", job_id="j1")
FIXED_NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def executor(registry, store) -> Executor:
    return Executor(registry, store, clock=lambda: FIXED_NOW, shell_enabled=False)


async def test_an_allowed_call_runs_the_handler_and_is_audited(executor, recorder, store):
    out = await executor.call("test.echo", '{"text": "ab", "times": 2}', GATEWAY)

    assert out == EchoOutput(text="abab")
    assert recorder.calls == [("test.echo", EchoInput(text="ab", times=2))]
    (event,) = await audit_events(store)
    assert (event.operation, event.caller, event.trust) == ("test.echo", "gw-telegram", "gateway")
    assert (event.allowed, event.outcome, event.error) == (True, "ok", None)
    assert event.audit_kind == "test"
    assert event.duration_ms >= 0
    assert event.at == int(FIXED_NOW * 1000)
    canonical = msgspec.json.encode(EchoInput(text="ab", times=2), order="deterministic")
    assert event.input_sha256 == hashlib.sha256(canonical).hexdigest()


@pytest.mark.parametrize("caller", [GATEWAY, CHILD, Caller(trust="system", id="cron")])
async def test_an_operator_only_operation_is_denied_to_others_before_its_handler_runs(
    executor, recorder, store, caller
):
    with pytest.raises(OperationDenied, match="test.admin may not be run by"):
        await executor.call("test.admin", {"text": "rm -rf"}, caller)

    assert recorder.calls == []
    (event,) = await audit_events(store)
    assert (event.operation, event.allowed, event.outcome) == ("test.admin", False, "denied")
    assert (event.caller, event.trust) == (caller.id, caller.trust)
    assert event.mutating is True


async def test_the_same_operation_runs_for_the_operator(executor, recorder, store):
    assert await executor.call("test.admin", {"text": "x"}, OPERATOR) == EchoOutput(text="x")
    assert recorder.calls == [("test.admin", EchoInput(text="x"))]
    assert [e.outcome for e in await audit_events(store)] == ["ok"]


async def test_an_unknown_trust_class_is_denied(executor, recorder, store):
    with pytest.raises(OperationDenied):
        await executor.call("test.echo", {"text": "x"}, Caller(trust="root", id="evil"))
    assert recorder.calls == []
    assert [(e.trust, e.outcome) for e in await audit_events(store)] == [("root", "denied")]


async def test_an_unknown_operation_is_denied_and_audited(executor, store):
    with pytest.raises(UnknownOperation, match="unknown operation 'fs.delete'"):
        await executor.call("fs.delete", {"path": "/"}, CHILD)
    (event,) = await audit_events(store)
    assert (event.operation, event.audit_kind, event.allowed, event.outcome) == (
        "fs.delete", None, False, "denied",
    )
    assert (event.run_id, event.job_id) == ("run-child", "j1")


@pytest.mark.parametrize("raw, message", [
    ('{"text": 3}', "Expected `str`, got `int`"),
    ('{"text": "a", "times": 11}', "Expected `int` <= 10"),
    ('{"text": "a", "extra": 1}', "unknown field `extra`"),
    ("{not json", "malformed"),
    ("[1, 2]", "Expected `object`"),
    ({"times": 2}, "missing required field `text`"),
    (42, "expected a JSON object, got int"),
])
async def test_invalid_input_is_refused_before_the_handler_and_audited(
    executor, recorder, store, raw, message
):
    with pytest.raises(InvalidOperationInput, match="invalid input for test.echo") as caught:
        await executor.call("test.echo", raw, GATEWAY)
    assert message.lower() in str(caught.value).lower()
    assert recorder.calls == []
    (event,) = await audit_events(store)
    assert (event.allowed, event.outcome) == (False, "invalid")
    assert event.error.startswith("InvalidOperationInput: invalid input for test.echo")


async def test_input_may_be_bytes_a_dict_or_a_struct(executor, recorder):
    await executor.call("test.echo", b'{"text": "b"}', GATEWAY)
    await executor.call("test.echo", {"text": "d"}, GATEWAY)
    await executor.call("test.echo", EchoInput(text="s"), GATEWAY)
    assert [value.text for _, value in recorder.calls] == ["b", "d", "s"]


async def test_input_is_validated_only_after_the_trust_check(executor, store):
    with pytest.raises(OperationDenied):
        await executor.call("test.admin", "{not json", CHILD)
    assert [e.outcome for e in await audit_events(store)] == ["denied"]


async def test_a_handler_error_propagates_and_is_audited(executor, recorder, store):
    with pytest.raises(RuntimeError, match="the handler broke"):
        await executor.call("test.boom", {"text": "x"}, OPERATOR)
    assert len(recorder.calls) == 1
    (event,) = await audit_events(store)
    assert (event.allowed, event.outcome) == (True, "error")
    assert event.error == "RuntimeError: the handler broke"


async def test_a_handler_that_overruns_its_timeout_is_cancelled_and_audited(executor, store):
    with pytest.raises(OperationTimeout, match="test.sleepy timed out after 0.05s"):
        await executor.call("test.sleepy", {"text": "x"}, OPERATOR)
    (event,) = await audit_events(store)
    assert (event.allowed, event.outcome) == (True, "timeout")


async def test_a_cancelled_call_is_still_audited(executor, recorder, store):
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(executor.call, "test.sleepy", {"text": "x"}, OPERATOR)
            while not recorder.calls:
                await trio.lowlevel.checkpoint()
            scope.cancel()
    (event,) = await audit_events(store)
    assert (event.allowed, event.outcome) == (True, "cancelled")


async def test_every_call_and_every_denial_is_audited_in_order(executor, store):
    attempts = [
        ("test.echo", {"text": "a"}, CHILD),
        ("test.admin", {"text": "a"}, CHILD),
        ("test.admin", {"text": "a"}, GATEWAY),
        ("test.admin", {"text": "a"}, OPERATOR),
        ("nope", {}, OPERATOR),
        ("test.echo", {"text": 1}, OPERATOR),
    ]
    for name, raw, caller in attempts:
        try:
            await executor.call(name, raw, caller)
        except OperationDenied:
            pass
        except InvalidOperationInput:
            pass
    events = await audit_events(store)
    assert [(e.operation, e.trust, e.outcome) for e in events] == [
        ("test.echo", "child-agent", "ok"),
        ("test.admin", "child-agent", "denied"),
        ("test.admin", "gateway", "denied"),
        ("test.admin", "operator", "ok"),
        ("nope", "operator", "denied"),
        ("test.echo", "operator", "invalid"),
    ]
    streams = {r.stream for r in await store.read_all(types=["audit.operation"])}
    assert streams == {"audit-2026-01-01"} == {audit_stream(int(FIXED_NOW * 1000))}


async def test_operations_are_found_by_their_wire_name(executor, recorder):
    await executor.call("test__echo", {"text": "w"}, CHILD)
    assert recorder.calls == [("test.echo", EchoInput(text="w"))]


def test_audit_stream_names_the_utc_day_at_every_boundary():
    from datetime import datetime, timezone

    def expected(at_ms: int) -> str:
        return "audit-" + datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d")

    day = 86_400_000
    for at in [0, 1, day - 1, day, day + 1, -1, -day, -day - 1, 1_796_019_294_291, 1_796_019_294_291 - 10 * day]:
        assert audit_stream(at) == expected(at), at
    assert audit_stream(day - 1) == "audit-1970-01-01" and audit_stream(day) == "audit-1970-01-02"


async def test_a_refusal_made_before_the_call_is_audited_like_a_denial(executor, recorder, store):
    await executor.refuse("test.admin", '{"text": "x"}', CHILD, "test.admin is not allowed for this run")
    request = executor.refusal("nope", b"\xff not json", GATEWAY, "not JSON", outcome="invalid",
                               error_type="InvalidArguments")

    (event,) = await audit_events(store)
    assert recorder.calls == []
    assert (event.operation, event.audit_kind, event.allowed, event.outcome) == ("test.admin", "test", False, "denied")
    assert (event.caller, event.run_id, event.job_id) == ("run-child", "run-child", "j1")
    assert event.error == "OperationDenied: test.admin is not allowed for this run"
    assert event.input_sha256 == hashlib.sha256(b'{"text": "x"}').hexdigest()
    assert event.mutating is True and event.digest is not None
    (built,) = request.events
    assert (built.audit_kind, built.outcome, built.error) == (None, "invalid", "InvalidArguments: not JSON")
    assert built.input_sha256 == hashlib.sha256(b"\xff not json").hexdigest()


async def test_a_handler_s_user_error_is_audited_as_invalid_and_a_store_error_as_error(store):
    from gormes.errors import StoreFull, UserError
    from gormes.ops.registry import Registry
    from ops_helpers import spec

    async def bad_input(ctx, value):
        raise UserError("no such thing")

    async def disk_full(ctx, value):
        raise StoreFull("the disk is full")

    executor = Executor(Registry([spec("test.bad", bad_input, trust={"operator"}),
                                  spec("test.full", disk_full, trust={"operator"})]), store)
    with pytest.raises(UserError):
        await executor.call("test.bad", {"text": "a"}, OPERATOR)
    with pytest.raises(StoreFull):
        await executor.call("test.full", {"text": "a"}, OPERATOR)
    assert [(e.operation, e.outcome) for e in await audit_events(store)] == [
        ("test.bad", "invalid"), ("test.full", "error")]


async def test_every_audit_event_is_sealed_onto_its_day_s_chain(executor, store):
    from gormes.events.audit_chain import GENESIS, record_digest

    await executor.call("test.echo", {"text": "a"}, OPERATOR)
    with pytest.raises(OperationDenied):
        await executor.call("test.admin", {"text": "a"}, GATEWAY)
    records = await store.read_stream(audit_stream(int(FIXED_NOW * 1000)))
    assert [r.event.prev for r in records] == [GENESIS, records[0].event.digest]
    for r in records:
        assert r.event.digest == record_digest(r.event, r.stream, r.version)


async def test_a_change_sealed_with_its_audit_commits_with_it_and_is_audited_once(store):
    """OperationContext.seal_audit: the handler's change and the call's audit record in
    one transaction; undone together when that transaction fails; a failure after the
    commit is recorded as well; a caller's own AuditWriter keeps its turn."""
    from gormes.events.notes import NoteAdded
    from gormes.ops.registry import Registry
    from ops_helpers import spec

    async def change(ctx, value):
        def write(tx):
            tx.append("notes-x", [NoteAdded(text=value.text)])
            ctx.seal_audit(tx)
            if value.text == "undo":
                raise RuntimeError("the change failed after the seal")

        await store.transact(write)
        if value.text == "after":
            raise RuntimeError("a step after the commit failed")
        return EchoOutput(text=value.text)

    async def peek(ctx, value):
        return EchoOutput(text=str(ctx.seal_audit is None))

    executor = Executor(Registry([spec("test.change", change, trust={"operator"}),
                                  spec("test.peek", peek, trust={"operator"})]), store)
    await executor.call("test.change", {"text": "kept"}, OPERATOR)
    records = await store.read_all()
    assert [(r.type, r.stream) for r in records] == [("note.added", "notes-x"), ("audit.operation", records[1].stream)]
    with pytest.raises(RuntimeError, match="failed after the seal"):
        await executor.call("test.change", {"text": "undo"}, OPERATOR)
    with pytest.raises(RuntimeError, match="after the commit"):
        await executor.call("test.change", {"text": "after"}, OPERATOR)
    assert [r.event.text for r in await store.read_stream("notes-x")] == ["kept", "after"]
    assert [e.outcome for e in await audit_events(store)] == ["ok", "error", "ok", "error"]

    async def writer(request, output, error):
        await store.append(request.stream, request.events)

    assert (await executor.call("test.peek", {"text": "a"}, OPERATOR)).text == "False"
    assert (await executor.call("test.peek", {"text": "a"}, OPERATOR, audit=writer)).text == "True"
