"""`@gormes.operation`: the spec it builds, the checks at decoration time, the
declared registry (twice, reload, wire clashes), and the wire-name rules of the
registry they land in."""

from __future__ import annotations

import msgspec
import pytest

import gormes
from gormes.ops.declared import DEFAULT_TRUST, DeclaredOperations, operation
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry, wire_name
from gormes.ops.spec import Caller, InvalidOperationSpec, OperationContext
from gormes.errors import UserError
from ops_helpers import audit_events


class WeatherIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    city: str


class WeatherOut(msgspec.Struct, kw_only=True):
    city: str
    celsius: float


@pytest.fixture
def declared() -> DeclaredOperations:
    return DeclaredOperations()


def declare_weather(declared: DeclaredOperations, name: str = "weather.get", **options):
    @operation(name, registry=declared, **options)
    async def weather(ctx: OperationContext, input: WeatherIn) -> WeatherOut:
        """The temperature in a city.

        A second paragraph that is not part of the description."""
        return WeatherOut(city=input.city, celsius=float(len(input.city)))

    return weather


def test_the_spec_comes_from_the_annotations_and_the_docstring(declared):
    fn = declare_weather(declared)
    (spec,) = declared.specs()
    assert (spec.name, spec.input_type, spec.output_type, spec.handler) == ("weather.get", WeatherIn, WeatherOut, fn)
    assert spec.description == "The temperature in a city."
    assert spec.trust == frozenset(DEFAULT_TRUST) and "gateway" not in spec.trust
    assert (spec.audit_kind, spec.prompt_visible, spec.mutating, spec.idempotent) == ("weather.read", True, False, True)


@pytest.mark.parametrize("options, idempotent", [
    ({}, True),  # a read
    ({"mutating": True}, False),  # a write does its effect again unless it says otherwise
    ({"mutating": True, "idempotent": True}, True),
    ({"idempotent": False}, False),
])
def test_idempotent_defaults_to_not_mutating(declared, options, idempotent):
    declare_weather(declared, **options)
    (spec,) = declared.specs()
    assert spec.idempotent is idempotent


def test_options_override_the_defaults(declared):
    class Other(msgspec.Struct):
        x: int

    declare_weather(declared, input=Other, output=dict, trust="gateway", mutating=True, idempotent=False,
                    description="Other words.", timeout=2.5)
    (spec,) = declared.specs()
    assert (spec.input_type, spec.output_type, spec.trust) == (Other, dict, frozenset({"gateway"}))
    assert (spec.description, spec.audit_kind, spec.timeout, spec.idempotent) == ("Other words.", "weather.write", 2.5, False)


def test_the_public_face_exports_the_decorator_and_what_a_handler_annotates():
    assert gormes.operation is operation
    assert gormes.OperationContext is OperationContext and gormes.Caller is Caller


@pytest.mark.parametrize("options, says", [
    ({"trust": ["operator", "root"]}, "unknown trust class root"),
    ({"trust": ["operator"]}, "operator-only operation must never be prompt-visible"),
    ({"timeout": 0}, "timeout must be > 0"),
    ({"name": "weather get"}, "no provider can carry it"),
    ({"name": "w." + "x" * 70}, "no provider can carry it"),
])
def test_a_bad_spec_is_refused_where_it_is_declared(declared, options, says):
    with pytest.raises(InvalidOperationSpec, match=says) as caught:
        declare_weather(declared, **options)
    assert isinstance(caught.value, UserError)  # one line at the CLI, exit 2
    assert len(declared) == 0


def test_a_function_that_is_not_an_operation_is_refused(declared):
    def not_async(ctx: OperationContext, input: WeatherIn) -> WeatherOut: ...

    async def one_argument(input: WeatherIn) -> WeatherOut: ...

    async def no_return(ctx: OperationContext, input: WeatherIn): ...

    async def no_docstring(ctx: OperationContext, input: WeatherIn) -> WeatherOut: ...

    async def not_a_struct(ctx: OperationContext, input: int) -> WeatherOut:
        """Doc."""

    async def unresolved(ctx: OperationContext, input: "Nowhere") -> WeatherOut:  # noqa: F821
        """Doc."""

    no_return.__doc__ = "Doc."
    for fn, says in [
        (not_async, "must be an async function"), (one_argument, "must take \\(ctx, input\\)"),
        (no_return, "annotate its return type"), (no_docstring, "no description"),
        (not_a_struct, "is not a msgspec Struct"), (unresolved, "cannot read the annotations.*NameError"),
    ]:
        with pytest.raises(InvalidOperationSpec, match=says):
            operation("x.y", registry=declared)(fn)
    assert len(declared) == 0


def test_a_name_declared_by_two_modules_is_refused_naming_both(declared):
    declare_weather(declared)

    async def elsewhere(ctx: OperationContext, input: WeatherIn) -> WeatherOut:
        """Elsewhere."""

    elsewhere.__module__ = "someone_else"
    with pytest.raises(InvalidOperationSpec) as caught:
        operation("weather.get", registry=declared)(elsewhere)
    line = str(caught.value)
    assert "'weather.get' is declared twice" in line
    assert __file__ in line and "someone_else" in line and "\n" not in line


def test_the_same_module_declaring_again_replaces_its_operation(declared):
    declare_weather(declared, description="First.")
    declare_weather(declared, description="Second.")
    assert [s.description for s in declared.specs()] == ["Second."]


def test_two_declared_names_that_meet_on_the_wire_are_refused(declared):
    declare_weather(declared, name="weather.get")

    async def other(ctx: OperationContext, input: WeatherIn) -> WeatherOut:
        """Other."""

    other.__module__ = "other_module"
    with pytest.raises(InvalidOperationSpec, match="'weather__get' .* clashes with 'weather.get'.*on the wire"):
        operation("weather__get", registry=declared)(other)


def test_forget_snapshot_and_restore(declared):
    declare_weather(declared)
    saved = declared.snapshot()
    declared.forget_module(__name__)
    assert len(declared) == 0
    declared.restore(saved)
    assert "weather.get" in declared


# -- the registry's names -----------------------------------------------------------


def test_names_as_mcp_tools_need_them_are_accepted_and_found_by_their_wire_name(declared):
    names = ["mcp.time.get_current_time", "mcp.my-server.Get-Time", "mcp.git.2fa", "w." + "x" * 60]
    for name in names:
        declare_weather(declared, name=name)
    registry = Registry(declared.specs())
    for name in names:
        spec = registry.by_wire(wire_name(name))
        assert spec is not None and spec.name == name and registry.get(wire_name(name)) is spec
        assert len(wire_name(name)) <= 64
    assert registry.by_wire("mcp.time.get_current_time") is None  # a neutral name is not a wire name
    assert registry.by_wire("nope") is None


def test_by_wire_is_the_exact_reverse_not_a_string_replacement(declared):
    # A segment holding `__` would be turned into a dot by a replacement.
    declare_weather(declared, name="mcp.my__server.tool")
    registry = Registry(declared.specs())
    assert registry.by_wire("mcp__my__server__tool").name == "mcp.my__server.tool"
    assert registry.get("mcp__my__server__tool").name == "mcp.my__server.tool"


async def test_a_declared_operation_runs_through_the_executor_with_its_trust_and_audit(declared, store):
    declare_weather(declared)
    executor = Executor(Registry(declared.specs()), store)
    out = await executor.call("weather__get", {"city": "Oslo"}, Caller(trust="child-agent", id="run-1"))
    assert out == WeatherOut(city="Oslo", celsius=4.0)
    with pytest.raises(gormes.UserError, match="may not be run by a 'gateway' caller"):
        await executor.call("weather.get", {"city": "Oslo"}, Caller(trust="gateway", id="mcp:x"))
    events = await audit_events(store)
    assert [(e.operation, e.trust, e.outcome, e.audit_kind) for e in events] == [
        ("weather.get", "child-agent", "ok", "weather.read"), ("weather.get", "gateway", "denied", "weather.read"),
    ]
