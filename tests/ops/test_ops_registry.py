"""Registry validation and the tool schemas each trust class is given."""

from __future__ import annotations

import msgspec
import pytest

from ops_helpers import EchoInput, EchoOutput, make_echo, spec
from gormes.ops.registry import Registry, input_schema, wire_name
from gormes.ops.spec import InvalidOperationSpec, OperationSpec, ToolSchema


class Custom:
    pass


class Bad(msgspec.Struct):
    thing: Custom


class Inner(msgspec.Struct):
    x: int


class Outer(msgspec.Struct):
    inner: Inner


def test_an_operator_only_operation_can_never_be_prompt_visible(recorder):
    with pytest.raises(InvalidOperationSpec, match="operator-only operation must never be prompt-visible"):
        Registry([spec("x.admin", make_echo(recorder, "x"), trust={"operator"}, prompt_visible=True)])


@pytest.mark.parametrize("changes, message", [
    ({"trust": frozenset()}, "no trust class"),
    ({"trust": frozenset({"operator", "root"})}, "unknown trust class root"),
    ({"audit_kind": ""}, "no audit kind"),
    ({"audit_kind": "  "}, "no audit kind"),
    ({"input_type": dict}, "is not a msgspec Struct"),
    ({"input_type": int}, "is not a msgspec Struct"),
    ({"name": "Fs Read"}, "no provider can carry it"),
    ({"name": "fs.read/all"}, "no provider can carry it"),
    ({"name": "fs." + "r" * 61}, "no provider can carry it"),
    ({"name": "fs..read"}, "name must be dotted words"),
    ({"name": "Fs.read"}, "the first starting with a lowercase letter"),
    ({"name": "fs.read."}, "name must be dotted words"),
    ({"timeout": 0}, "timeout must be > 0"),
    ({"description": ""}, "description is empty"),
    ({"operator_mcp": True}, "operator_mcp serves it to operator MCP callers, but the operator may not call it"),
])
def test_registration_refuses_incomplete_specs(recorder, changes, message):
    base = spec("x.ok", make_echo(recorder, "x"), trust={"gateway"})
    fields = {f: getattr(base, f) for f in OperationSpec.__dataclass_fields__}
    with pytest.raises(InvalidOperationSpec, match=message):
        Registry([OperationSpec(**(fields | changes))])


def test_an_input_type_without_a_json_schema_is_refused(recorder):
    base = spec("x.bad", make_echo(recorder, "x"), trust={"gateway"})
    fields = {f: getattr(base, f) for f in OperationSpec.__dataclass_fields__}
    with pytest.raises(InvalidOperationSpec, match="has no JSON schema"):
        Registry([OperationSpec(**(fields | {"input_type": Bad}))])


def test_a_name_is_registered_once_and_must_not_clash_on_the_wire(recorder):
    reg = Registry([spec("a.b", make_echo(recorder, "x"), trust={"gateway"})])
    with pytest.raises(InvalidOperationSpec, match="registered twice"):
        reg.register(spec("a.b", make_echo(recorder, "x"), trust={"gateway"}))
    with pytest.raises(InvalidOperationSpec, match="clashes with 'a.b'"):
        reg.register(spec("a__b", make_echo(recorder, "x"), trust={"gateway"}))


def test_list_filters_by_trust_class_and_prompt_visibility(registry):
    assert [s.name for s in registry.list()] == ["test.admin", "test.boom", "test.echo", "test.sleepy"]
    assert [s.name for s in registry.list(trust="gateway")] == ["test.echo"]
    assert [s.name for s in registry.list(trust="operator", prompt_visible=False)] == [
        "test.admin", "test.boom", "test.sleepy",
    ]
    assert registry.get("test.admin").operator_only
    assert registry.get("nope") is None and "test.echo" in registry and "nope" not in registry


@pytest.mark.parametrize("trust", ["gateway", "child-agent", "system", "operator"])
def test_tool_schemas_offer_only_prompt_visible_operations_the_class_may_call(registry, trust):
    schemas = registry.tool_schemas(trust)
    assert [s.name for s in schemas] == ["test.echo"]
    assert "test.admin" not in {s.name for s in schemas}


def test_a_tool_schema_is_the_input_types_json_schema(registry):
    (tool,) = registry.tool_schemas("child-agent")
    assert tool == ToolSchema(
        name="test.echo",
        description="test operation test.echo",
        parameters={
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "times": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    )
    assert registry.tool_schemas("child-agent", allow=["fs.read"]) == []


def test_nested_types_keep_their_defs_inside_the_parameters():
    schema = input_schema(Outer)
    assert schema["properties"]["inner"] == {"$ref": "#/$defs/Inner"}
    assert schema["$defs"]["Inner"]["properties"] == {"x": {"type": "integer"}}


def test_wire_names_have_no_dots():
    assert wire_name("fs.read") == "fs__read"
    assert EchoOutput(text="x").text == "x" and EchoInput(text="y").times == 1
