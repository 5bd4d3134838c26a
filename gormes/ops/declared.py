"""Users' operations: the `@gormes.operation` decorator and the one registry of
what was declared with it.

    import msgspec
    import gormes

    class WeatherIn(msgspec.Struct, forbid_unknown_fields=True):
        city: str

    class WeatherOut(msgspec.Struct):
        celsius: float

    @gormes.operation("weather.get", trust=["operator", "child-agent"])
    async def weather(ctx: gormes.OperationContext, input: WeatherIn) -> WeatherOut:
        \"\"\"The current temperature in a city.\"\"\"
        return WeatherOut(celsius=21.5)

The decorator builds an `OperationSpec` (input and output types from the
annotations unless given, the description from the docstring's first paragraph)
and checks it at once, as the registry would: a bad spec raises
`InvalidOperationSpec` where it is declared. `gormes.tools.builtin.default_registry()`
adds what is declared here after the built-in operations, so a declared operation
goes through the same executor (trust, validation, timeout, audit), tool schemas,
MCP server, doctor and replay as they do; a file is loaded with `--import`.

Default trust (`DEFAULT_TRUST`): the operator, the system (the daemon, cron) and
subagents. A gateway, a remote caller (`gormes mcp`'s default class), is trusted
least and must be granted explicitly.

Declaring a name twice is refused, naming both places, unless it is the same
module declaring it again: a reload (the daemon's SIGHUP, a file imported again)
replaces its own operations.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from gormes.ops.registry import Registry, wire_name
from gormes.ops.spec import Handler, InvalidOperationSpec, OperationSpec

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TRUST: tuple[str, ...] = ("operator", "system", "child-agent")


@dataclass(frozen=True)
class Declared:
    """One declared operation and where it was declared."""

    spec: OperationSpec
    module: str  # the function's __module__
    origin: str  # its file, or the module's name when it has none

    def place(self, other: Declared) -> str:
        """Where this one was declared, told apart from `other`."""
        if self.origin == other.origin and self.module != other.module:
            return f"{self.origin} (as module {self.module})"
        return self.origin


class DeclaredOperations:
    """Declared operations by name, each with the module that declared it."""

    def __init__(self) -> None:
        self._declared: dict[str, Declared] = {}

    def declare(self, spec: OperationSpec, *, module: str, origin: str) -> OperationSpec:
        Registry([spec])  # the registry's own checks of one spec, here where it is declared
        new = Declared(spec, module, origin)
        earlier = self._declared.get(spec.name)
        if earlier is not None and earlier.module != module:
            raise InvalidOperationSpec(
                f"operation {spec.name!r} is declared twice: in {earlier.place(new)} and in {new.place(earlier)}"
            )
        wire = wire_name(spec.name)
        for other in self._declared.values():
            if other.spec.name != spec.name and wire_name(other.spec.name) == wire:
                raise InvalidOperationSpec(
                    f"operation {spec.name!r} ({new.place(other)}) clashes with {other.spec.name!r} "
                    f"({other.place(new)}): both are {wire!r} on the wire"
                )
        self._declared[spec.name] = new
        return spec

    def forget_module(self, module: str) -> None:
        """Drop what `module` declared (before it is executed again)."""
        self._declared = {n: d for n, d in self._declared.items() if d.module != module}

    def snapshot(self) -> dict[str, Declared]:
        return dict(self._declared)

    def restore(self, snapshot: dict[str, Declared]) -> None:
        self._declared = dict(snapshot)

    def specs(self) -> list[OperationSpec]:
        return [d.spec for _, d in sorted(self._declared.items())]

    def entries(self) -> list[Declared]:
        return [d for _, d in sorted(self._declared.items())]

    def __contains__(self, name: object) -> bool:
        return name in self._declared

    def __len__(self) -> int:
        return len(self._declared)


# Where `@gormes.operation` declares; `default_registry()` reads it.
declared = DeclaredOperations()


def operation(
    name: str,
    *,
    input: type | None = None,  # noqa: A002 - the decorator's public keyword
    output: type | None = None,
    trust: Iterable[str] | str = DEFAULT_TRUST,
    mutating: bool = False,
    idempotent: bool | None = None,
    prompt_visible: bool = True,
    timeout: float = 10.0,
    description: str | None = None,
    audit_kind: str | None = None,
    requires_approval: bool = False,
    write_ahead: bool = False,
    registry: DeclaredOperations | None = None,
) -> Callable[[F], F]:
    """Decorator: declare an async `(ctx: OperationContext, input: In) -> Out`
    function as the operation `name`. `input` and `output` default to its
    annotations, `description` to its docstring's first paragraph, `audit_kind`
    to `<first segment of name>.write` when `mutating`, else `.read`. `idempotent`
    defaults to `not mutating`: a write is taken to do its effect again when called
    again (a fork or an eval of runs then asks for `--yes`) unless it says otherwise.
    `requires_approval`: a run's call waits for a person's `gormes approve` first
    (decision 0033). `write_ahead`: for a `mutating` operation whose change no log
    transaction covers (a file written, a request sent), a `started` audit record
    is committed before the function runs, so a process killed after the change
    still leaves a trace (decision 0062). Returns the function unchanged."""

    def decorate(fn: F) -> F:
        where = f"operation {name!r}"
        if not inspect.iscoroutinefunction(fn):
            raise InvalidOperationSpec(f"{where}: {_qualname(fn)} must be an async function")
        input_type, output_type = _types(where, fn, input, output)
        text = description if description is not None else _first_paragraph(inspect.getdoc(fn))
        if not text:
            raise InvalidOperationSpec(f"{where}: no description (give it a docstring or description=)")
        classes = (trust,) if isinstance(trust, str) else tuple(trust)
        first = name.split(".", 1)[0] if isinstance(name, str) else ""
        spec = OperationSpec(
            name=name, description=text, input_type=input_type, output_type=output_type,
            handler=typing.cast(Handler, fn), trust=frozenset(classes),
            audit_kind=audit_kind if audit_kind is not None else f"{first}.{'write' if mutating else 'read'}",
            mutating=mutating, idempotent=(not mutating) if idempotent is None else idempotent, prompt_visible=prompt_visible, timeout=timeout,
            requires_approval=requires_approval, write_ahead=write_ahead,
        )
        module = getattr(fn, "__module__", None) or "?"
        (declared if registry is None else registry).declare(spec, module=module, origin=_origin(fn, module))
        return fn

    return decorate


def _types(where: str, fn: Callable[..., Any], input_type: type | None,
           output_type: type | None) -> tuple[type, type]:
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) != 2:
        raise InvalidOperationSpec(
            f"{where}: {_qualname(fn)} must take (ctx, input), it takes {len(params)} positional parameter(s)"
        )
    if input_type is not None and output_type is not None:
        return input_type, output_type
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - an annotation that does not resolve is the user's input
        raise InvalidOperationSpec(
            f"{where}: cannot read the annotations of {_qualname(fn)} ({type(exc).__name__}: {exc}); "
            "pass input= and output="
        ) from None
    if input_type is None:
        input_type = hints.get(params[1].name)
        if input_type is None:
            raise InvalidOperationSpec(f"{where}: annotate its input (a msgspec Struct) or pass input=")
    if output_type is None:
        output_type = hints.get("return")
        if output_type is None:
            raise InvalidOperationSpec(f"{where}: annotate its return type or pass output=")
    return input_type, output_type


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _origin(fn: Callable[..., Any], module: str) -> str:
    file = getattr(sys.modules.get(module), "__file__", None)
    if file is None:
        try:
            file = inspect.getsourcefile(fn)
        except TypeError:
            file = None
    return str(file) if file else module


def _qualname(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
