"""The doctor's operation checks see declared operations (named in the line) and
specs that carry their own JSON schema (an MCP tool's) as sound."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import msgspec
import pytest

from gormes.health.operations import check_specs, spec_problems
from gormes.ops.declared import declared, operation
from gormes.ops.spec import OperationContext, OperationSpec
from gormes.tools.builtin import default_registry


class In(msgspec.Struct):
    city: str


@pytest.fixture(autouse=True)
def clean_declared() -> Iterator[None]:
    saved = declared.snapshot()
    yield
    declared.restore(saved)


async def handler(ctx: OperationContext, input: dict) -> dict:
    return input


def raw(schema: object) -> OperationSpec:
    return OperationSpec(name="mcp.x.y", description="d", input_type=dict, output_type=dict, handler=handler,
                         trust=frozenset({"operator"}), audit_kind="mcp.call", schema=schema)  # type: ignore[arg-type]


def test_a_declared_operation_is_counted_and_named():
    @operation("doctor_test.get")
    async def get(ctx: OperationContext, input: In) -> dict:
        """Doc."""
        return {}

    verdict = check_specs(SimpleNamespace(operations=default_registry().list()))
    assert verdict.status == "ok" and "(1 declared: doctor_test.get)" in verdict.message


def test_a_spec_with_its_own_object_schema_has_no_problem_and_a_bad_one_has():
    assert spec_problems(raw({"type": "object", "properties": {}})) == []
    assert spec_problems(raw({"type": "array"})) == ["its input schema is not a JSON object schema"]
