"""The one registry of operations, and the model tool schemas derived from it.

Registration refuses a spec that could not be called safely: a bad name, no trust
class or an unknown one, no audit kind, an input type msgspec cannot describe as a
JSON object, a non-positive timeout, and above all an operator-only operation
marked prompt-visible (a model must never be offered what only an operator may run);
`operator_mcp` (served to an operator's MCP client, decision 0037) is refused on
an operation the operator may not call.

Names are neutral and dotted (`fs.read`, `mcp.time.get_current_time`): segments of
[A-Za-z0-9_-], the first starting with a lowercase letter. Each also has a wire
name (dots as `__`, `wire_name`) that must match `WIRE_NAME`, the rule of OpenAI's
and Anthropic's tool names, or no provider could carry it; two names with one wire
name are refused, so the registry maps wire names back exactly (`by_wire`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import msgspec

from gormes.ops.spec import TRUST_CLASSES, InvalidOperationSpec, OperationSpec, ToolSchema

T = TypeVar("T")

_NAME = re.compile(r"^[a-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
# OpenAI's and Anthropic's rule for a tool's name.
WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def wire_name(name: str) -> str:
    """The operation's name with dots as double underscores, for providers whose
    tool names allow only [A-Za-z0-9_-] (`fs.read` -> `fs__read`)."""
    return name.replace(".", "__")


def input_schema(input_type: type) -> dict[str, Any]:
    """The JSON schema of a Struct type as one object schema, its `$defs` inlined."""
    if not (isinstance(input_type, type) and issubclass(input_type, msgspec.Struct)):
        raise InvalidOperationSpec(f"input type {input_type!r} is not a msgspec Struct")
    if input_type.__struct_config__.array_like:
        raise InvalidOperationSpec(f"input type {input_type.__name__} must not be array_like")
    try:
        (top,), defs = msgspec.json.schema_components([input_type])
    except (TypeError, ValueError) as exc:
        raise InvalidOperationSpec(f"input type {input_type.__name__} has no JSON schema: {exc}") from None
    root_name = top["$ref"].rsplit("/", 1)[1]
    schema = dict(defs.pop(root_name))
    schema.pop("title", None)
    if defs:
        schema["$defs"] = defs
    return schema


class Registry:
    def __init__(self, specs: Iterable[OperationSpec] = ()) -> None:
        self._specs: dict[str, OperationSpec] = {}
        self._by_wire: dict[str, OperationSpec] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._derived: dict[Any, Any] = {}  # see `derived`; emptied by `register`
        for spec in specs:
            self.register(spec)

    def register(self, spec: OperationSpec) -> OperationSpec:
        schema = _validate(spec)
        if spec.name in self._specs:
            raise InvalidOperationSpec(f"operation {spec.name!r} is registered twice")
        wire = wire_name(spec.name)
        clash = self._by_wire.get(wire)
        if clash is not None:
            raise InvalidOperationSpec(
                f"operation {spec.name!r} clashes with {clash.name!r}: both are {wire!r} on the wire"
            )
        self._specs[spec.name] = spec
        self._by_wire[wire] = spec
        self._schemas[spec.name] = schema
        self._derived.clear()
        return spec

    def derived(self, key: Any, build: Callable[[], T]) -> T:
        """`build()`, computed once per `key` until the next `register`: for values
        derived from the registered specs alone (the tools a run may offer, in the
        shape its caller needs). `build` must return something immutable."""
        try:
            return self._derived[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._derived[key] = build()
            return value

    def get(self, name: str) -> OperationSpec | None:
        """The spec called `name`, also found by its wire name (`fs__read`)."""
        spec = self._specs.get(name)
        return spec if spec is not None else self._by_wire.get(name)

    def by_wire(self, wire: str) -> OperationSpec | None:
        """The spec whose wire name (`wire_name`) is `wire`, or None."""
        return self._by_wire.get(wire)

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def list(self, trust: str | None = None, prompt_visible: bool | None = None) -> list[OperationSpec]:
        """Specs sorted by name; `trust` keeps those that class may call,
        `prompt_visible` those with that flag."""
        return [
            spec for name, spec in sorted(self._specs.items())
            if (trust is None or spec.allows(trust))
            and (prompt_visible is None or spec.prompt_visible == prompt_visible)
        ]

    def input_schema(self, name: str) -> dict[str, Any]:
        return self._schemas[name]

    def tool_schemas(self, trust: str, allow: Iterable[str] | None = None) -> list[ToolSchema]:
        """What a model acting with `trust` is offered: the prompt-visible specs
        that class may call (narrowed to `allow`, a tool allowlist, when given)."""
        key = ("tool_schemas", trust, None if allow is None else frozenset(allow))
        return list(self.derived(key, lambda: tuple(
            ToolSchema(name=spec.name, description=spec.description, parameters=self._schemas[spec.name])
            for spec in self.list(trust=trust, prompt_visible=True)
            if key[2] is None or spec.name in key[2]
        )))


def _validate(spec: OperationSpec) -> dict[str, Any]:
    where = f"operation {spec.name!r}"
    if not isinstance(spec.name, str):
        raise InvalidOperationSpec(f"{where}: name must be a string")
    wire = wire_name(spec.name)
    if not WIRE_NAME.match(wire):
        raise InvalidOperationSpec(
            f"{where}: its wire name {wire!r} does not match {WIRE_NAME.pattern} (OpenAI's and "
            "Anthropic's rule for tool names): no provider can carry it"
        )
    if not _NAME.match(spec.name):
        raise InvalidOperationSpec(
            f"{where}: name must be dotted words of letters, digits, _ and - "
            "(like fs.read), the first starting with a lowercase letter"
        )
    if not spec.description.strip():
        raise InvalidOperationSpec(f"{where}: description is empty")
    if not spec.trust:
        raise InvalidOperationSpec(f"{where}: no trust class may call it")
    unknown = sorted(set(spec.trust) - set(TRUST_CLASSES))
    if unknown:
        raise InvalidOperationSpec(
            f"{where}: unknown trust class {', '.join(unknown)} (known: {', '.join(TRUST_CLASSES)})"
        )
    if spec.operator_only and spec.prompt_visible:
        raise InvalidOperationSpec(f"{where}: an operator-only operation must never be prompt-visible")
    if spec.operator_mcp and not spec.allows("operator"):
        raise InvalidOperationSpec(f"{where}: operator_mcp serves it to operator MCP callers, "
                                   "but the operator may not call it")
    if spec.write_ahead and not spec.mutating:
        raise InvalidOperationSpec(f"{where}: write_ahead audits a change before it is made, "
                                   "but the operation is not mutating")
    if not spec.audit_kind or not spec.audit_kind.strip():
        raise InvalidOperationSpec(f"{where}: no audit kind")
    if not spec.timeout > 0:
        raise InvalidOperationSpec(f"{where}: timeout must be > 0 seconds")
    if not callable(spec.handler):
        raise InvalidOperationSpec(f"{where}: handler is not callable")
    if not isinstance(spec.output_type, type):
        raise InvalidOperationSpec(f"{where}: output type {spec.output_type!r} is not a type")
    if spec.schema is not None:
        return _raw_schema(where, spec.schema)
    try:
        return input_schema(spec.input_type)
    except InvalidOperationSpec as exc:
        raise InvalidOperationSpec(f"{where}: {exc}") from None


def _raw_schema(where: str, schema: Any) -> dict[str, Any]:
    """A spec's own JSON schema (`OperationSpec.schema`): it must describe an object."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise InvalidOperationSpec(f"{where}: its input schema must be a JSON object schema")
    try:
        msgspec.json.encode(schema)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidOperationSpec(f"{where}: its input schema is not JSON: {exc}") from None
    return schema
