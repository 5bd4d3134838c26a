"""log.redact through the executor: operator only; a gateway or child-agent caller
is denied before anything runs, and the denial is audited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_helpers import backend, store_on_both_backends  # noqa: F401 (fixtures)

from gormes.events.audit import OperationAudited
from gormes.events.base import RedactedEvent
from gormes.events.notes import NoteAdded
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied
from gormes.tools.builtin import default_registry


async def audits(store: Any) -> list[OperationAudited]:
    return [r.event for r in await store.read_all() if isinstance(r.event, OperationAudited)]


@pytest.mark.parametrize("trust", ["gateway", "child-agent", "system"])
async def test_only_the_operator_may_redact(store: Any, tmp_path: Path, trust: str) -> None:
    await store.append("notes-a", [NoteAdded(text="the password is hunter2")])
    executor = Executor(default_registry(), store, workspace=tmp_path)
    with pytest.raises(OperationDenied):
        await executor.call("log.redact", {"position": 1, "reason": "mine now"}, Caller(trust=trust, id="x"))
    assert isinstance((await store.read_stream("notes-a"))[0].event, NoteAdded)
    [audit] = await audits(store)
    assert (audit.operation, audit.trust, audit.allowed, audit.outcome) == ("log.redact", trust, False, "denied")

    done = await executor.call("log.redact", {"stream": "notes-a", "reason": "asked"}, Caller(trust="operator", id="cli"))
    assert done.positions == [1]
    assert isinstance((await store.read_stream("notes-a"))[0].event, RedactedEvent)
    assert [(a.trust, a.outcome) for a in await audits(store)] == [(trust, "denied"), ("operator", "ok")]
