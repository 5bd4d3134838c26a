"""Click parameters derived from an operation's input type.

A command that is exactly one operation is declared with `operation_command`:
its options are the fields of the operation's msgspec input Struct, so a field
added to the operation is an option at once (tests/cli/test_cli_derive.py checks
every such command against the registry). From each field come the flag
(`--field-name`), the type (str, int, float; a bool is a flag; a list repeats;
a Literal is a choice; `Meta(ge=, le=)` is a range; anything else is JSON), the
default and the help (the field's `Meta(description=)`). The command says only
which fields are positional and how a field is shown where the derived form is
not enough (`Shown`: a metavar, an env var, an older flag kept as an alias).

The command's function gets the input already built: only the fields the user
gave (the operation's defaults apply to the rest), validated by the executor's
own decoder before any store is opened, so a value the operation refuses is one
line and nothing is written; the audited call then runs it (decision 0019).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click
import msgspec
import msgspec.inspect as mi
from click.core import ParameterSource

from gormes.errors import UserError
from gormes.events.json_nesting import MAX_NESTING, nesting_depth_over
from gormes.ops.executor import decode_input
from gormes.ops.spec import OperationSpec


class NotJson(UserError):
    """Text given to an option that takes JSON is not JSON."""


class JsonText(click.ParamType):
    """A JSON value given as text (a field whose type is no scalar: Any, a dict, a Struct)."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default, already a value
        flag = param.opts[0] if param is not None and param.opts else "value"
        raw = value.encode("utf-8", "surrogatepass")
        if nesting_depth_over(raw):  # the decoder would recurse past Python's limit
            raise NotJson(f"{flag} is JSON nested deeper than {MAX_NESTING} levels")
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise NotJson(f"{flag} is not JSON: {exc}") from None


JSON = JsonText()


@dataclass(frozen=True)
class ValueFlag:
    """A flag that gives a Literal field one value: `--promote` for verdict "promoted"."""

    flag: str
    value: str
    help: str | None = None


@dataclass(frozen=True)
class Shown:
    """How one field is shown where the derived form is not enough."""

    metavar: str | None = None
    envvar: str | None = None
    help: str | None = None  # instead of the field's description
    aliases: tuple[str, ...] = ()  # older flag names, kept because README and tests use them
    values: tuple[ValueFlag, ...] = ()
    choices: Sequence[str] | None = None  # a str field whose values the library lists (recall's MODES)


@dataclass(frozen=True)
class OperatorCall:
    """One operation's input, built and validated from the command line, ready to run
    as the operator: `run()` opens the store and calls it (gormes/cli/ops.py);
    `on(door)` calls it through a door the command already holds."""

    obj: Any  # the command's Config (gormes/cli/main.py)
    spec: OperationSpec
    value: Any

    def run(self, **door_options: Any) -> Any:
        from gormes.cli.ops import operator_call  # lazy: the executor and registry load only to run one

        return operator_call(self.obj, self.spec.name, self.value, **door_options)

    async def on(self, door: Any) -> Any:
        return await door.call(self.spec.name, self.value)


class OperationCommand(click.Command):
    """A command that is exactly one operation; `spec` is the one its fields come from."""

    def __init__(self, *args: Any, spec: OperationSpec, field_names: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = spec
        self.field_names = field_names


def spec_named(specs: Sequence[OperationSpec], name: str) -> OperationSpec:
    """The spec called `name` in a tools module's SPECS (the objects the default
    registry holds: reading one module's is cheaper than building the registry)."""
    return next(spec for spec in specs if spec.name == name)


def operation_command(
    group: click.Group, name: str, spec: OperationSpec, *, arguments: Sequence[str] = (),
    shown: Mapping[str, Shown] | None = None,
) -> Callable[[Callable[..., Any]], OperationCommand]:
    """Make `fn(call, **its own options)` command `name` of `group`: `call` is an
    `OperatorCall` of `spec` with the input built from the derived parameters
    (`arguments`: the fields taken by position, in this order). `fn`'s own click
    options (`--json`) stay its."""
    shown = dict(shown or {})
    fields = {f.name: f for f in mi.type_info(spec.input_type).fields}
    unknown = sorted((set(arguments) | set(shown)) - set(fields))
    if unknown:
        raise ValueError(f"{spec.name} has no field {', '.join(unknown)}")

    def decorate(fn: Callable[..., Any]) -> OperationCommand:
        derived = field_params(spec.input_type, arguments=arguments, shown=shown)
        own = list(reversed(getattr(fn, "__click_params__", [])))

        @functools.wraps(fn)
        def callback(**kwargs: Any) -> Any:
            ctx = click.get_current_context()
            given = {key: kwargs.pop(key) for key in fields}
            return fn(OperatorCall(ctx.obj, spec, input_value(spec, given, ctx, derived)), **kwargs)

        command = OperationCommand(
            name, callback=callback, params=[*derived, *own], help=inspect.getdoc(fn),
            spec=spec, field_names=tuple(fields),
        )
        group.add_command(command)
        return command

    return decorate


def field_params(
    input_type: type, *, arguments: Sequence[str] = (), shown: Mapping[str, Shown] | None = None,
) -> list[click.Parameter]:
    """One click parameter per field of `input_type` (plus a field's value flags):
    the `arguments` first, in their order, then an option per other field."""
    shown = shown or {}
    fields = {f.name: f for f in mi.type_info(input_type).fields}
    params: list[click.Parameter] = [_argument(fields[name], shown.get(name, Shown())) for name in arguments]
    for field in fields.values():
        if field.name not in arguments:
            params += _options(field, shown.get(field.name, Shown()))
    return params


def input_value(spec: OperationSpec, given: Mapping[str, Any], ctx: click.Context,
                params: Sequence[click.Parameter]) -> Any:
    """`spec`'s input from the fields the user gave (on the command line or in the
    environment), validated as the executor validates it."""
    chosen: dict[str, Any] = {}
    for field in mi.type_info(spec.input_type).fields:
        if ctx.get_parameter_source(field.name) in (None, ParameterSource.DEFAULT):
            if field.required:
                raise _missing(field.name, params, ctx)
            continue
        value = given[field.name]
        chosen[field.encode_name] = list(value) if isinstance(value, tuple) else value
    return decode_input(spec, chosen)


def _missing(name: str, params: Sequence[click.Parameter], ctx: click.Context) -> click.UsageError:
    """A required field that no flag gave (one whose value flags keep click from requiring it)."""
    flags = [opt for p in params if p.name == name for opt in p.opts]
    return click.UsageError(f"Missing option '{flags[0]}'" + (f" (or {', '.join(flags[1:])})" if flags[1:] else ""),
                            ctx=ctx)


def _argument(field: mi.Field, shown: Shown) -> click.Argument:
    kind, _, _ = _parts(field.type)
    many = _repeats(kind)
    return click.Argument(
        [field.name], type=_click_type(_parts(kind.item_type)[0] if many else kind, shown),
        required=field.required, nargs=-1 if many else 1, metavar=shown.metavar or field.name.upper(),
    )


def _options(field: mi.Field, shown: Shown) -> list[click.Option]:
    kind, description, _ = _parts(field.type)
    flag = "--" + field.name.replace("_", "-")
    help_text = _help(shown.help or description, shown.envvar, _repeats(kind))
    default = field.default if _shows(field.default) else None
    common: dict[str, Any] = {"help": help_text, "envvar": shown.envvar, "metavar": shown.metavar}
    if isinstance(kind, mi.BoolType):
        decls = [f"{flag}/--no-{flag[2:]}" if field.default is True else flag, *shown.aliases, field.name]
        options = [click.Option(decls, is_flag=True, default=field.default is True, **common)]
    else:
        many = _repeats(kind)
        options = [click.Option(
            [flag, *shown.aliases, field.name],
            type=_click_type(_parts(kind.item_type)[0] if many else kind, shown), multiple=many,
            default=default, show_default=default is not None,
            required=field.required and not shown.values, **common,
        )]
    options += [click.Option([v.flag, field.name], flag_value=v.value, help=v.help or f"Same as {flag} {v.value}.")
                for v in shown.values]
    return options


def _help(text: str | None, envvar: str | None, repeats: bool) -> str | None:
    """The field's help with what the command line adds: `repeatable`, the env var."""
    notes = [note for note in ("repeatable" if repeats else None, f"env {envvar}" if envvar else None) if note]
    if not notes:
        return text
    body = (text or "").rstrip()
    end = "." if body.endswith(".") else ""
    return f"{body.removesuffix('.')} ({'; '.join(notes)}){end}".strip()


def _parts(kind: Any) -> tuple[Any, str | None, bool]:
    """The type under its Meta and its `| None`, its description, whether None is allowed."""
    description, optional = None, False
    while True:
        if isinstance(kind, mi.Metadata):
            description = description or (kind.extra_json_schema or {}).get("description")
            kind = kind.type
        elif isinstance(kind, mi.UnionType) and sum(isinstance(t, mi.NoneType) for t in kind.types) == 1 \
                and len(kind.types) == 2:
            optional = True
            kind = next(t for t in kind.types if not isinstance(t, mi.NoneType))
        else:
            return kind, description, optional


SCALARS = (mi.StrType, mi.IntType, mi.FloatType, mi.BoolType, mi.LiteralType)


def _repeats(kind: Any) -> bool:
    """A list of scalars is a repeated option; any other list is one JSON value."""
    return isinstance(kind, (mi.ListType, mi.SetType, mi.FrozenSetType)) and isinstance(
        _parts(kind.item_type)[0], SCALARS)


def _click_type(kind: Any, shown: Shown) -> click.ParamType:
    if shown.choices is not None:
        return click.Choice(list(shown.choices))
    if isinstance(kind, mi.StrType):
        return click.STRING
    if isinstance(kind, mi.BoolType):
        return click.BOOL
    if isinstance(kind, mi.IntType):
        return _range(click.IntRange, click.INT, kind)
    if isinstance(kind, mi.FloatType):
        return _range(click.FloatRange, click.FLOAT, kind)
    if isinstance(kind, mi.LiteralType) and all(isinstance(v, str) for v in kind.values):
        return click.Choice(list(kind.values))
    return JSON


def _range(ranged: Any, plain: click.ParamType, kind: Any) -> click.ParamType:
    low = kind.ge if kind.ge is not None else kind.gt
    high = kind.le if kind.le is not None else kind.lt
    if low is None and high is None:
        return plain
    return ranged(min=low, max=high, min_open=kind.gt is not None, max_open=kind.lt is not None)


def _shows(default: Any) -> bool:
    """Whether a field's default is worth showing in --help (a scalar that says something)."""
    return isinstance(default, (str, int, float)) and not isinstance(default, bool) and default != ""
