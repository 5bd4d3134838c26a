"""Fixtures for the operation tests: a registry with test operations whose handlers
record every call, over a real SQLite store."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest
import trio

from gormes.events.audit import OperationAudited
from gormes.ops.registry import Registry
from gormes.ops.spec import OperationContext, OperationSpec


class EchoInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: str
    times: Annotated[int, msgspec.Meta(ge=1, le=10)] = 1


class EchoOutput(msgspec.Struct, kw_only=True):
    text: str


class Recorder:
    """The handlers' side of the story: every input a handler actually received."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []


def make_echo(recorder: Recorder, name: str):
    async def echo(ctx: OperationContext, value: EchoInput) -> EchoOutput:
        recorder.calls.append((name, value))
        return EchoOutput(text=value.text * value.times)

    return echo


def spec(name: str, handler, *, trust: set[str], prompt_visible: bool = False, **kw) -> OperationSpec:
    return OperationSpec(
        name=name, description=f"test operation {name}", input_type=EchoInput,
        output_type=EchoOutput, handler=handler, trust=frozenset(trust),
        audit_kind="test", prompt_visible=prompt_visible, **kw,
    )


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def registry(recorder: Recorder) -> Registry:
    async def boom(ctx: OperationContext, value: EchoInput) -> EchoOutput:
        recorder.calls.append(("test.boom", value))
        raise RuntimeError("the handler broke\nsecond line")

    async def sleepy(ctx: OperationContext, value: EchoInput) -> EchoOutput:
        recorder.calls.append(("test.sleepy", value))
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return Registry([
        spec("test.echo", make_echo(recorder, "test.echo"),
             trust={"operator", "gateway", "child-agent", "system"}, prompt_visible=True),
        spec("test.admin", make_echo(recorder, "test.admin"), trust={"operator"}, mutating=True),
        spec("test.boom", boom, trust={"operator"}),
        spec("test.sleepy", sleepy, trust={"operator"}, timeout=0.05),
    ])


async def audit_events(store) -> list[OperationAudited]:
    records = await store.read_all(types=["audit.operation"])
    return [r.event for r in records]
