"""Helpers for the operation tests: test operations whose handlers record every
call, and a reader of the audit events in a real store."""

from __future__ import annotations

from typing import Annotated

import msgspec

from gormes.events.audit import OperationAudited
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


async def audit_events(store) -> list[OperationAudited]:
    records = await store.read_all(types=["audit.operation"])
    return [r.event for r in records]
