"""Click parameters derived from an operation's input type.

A command that is exactly one operation is declared with `operation_command`:
its options are the fields of the operation's msgspec input Struct, so a field
added to the operation is an option at once (tests/cli/test_cli_derive.py checks
every such command against the registry). From each field come the flag
(`--field-name`), the type (str, float; an int is a whole number; a bool is a
flag; a list repeats; a Literal is a choice; `Meta(ge=, le=)` is a range; anything
else is JSON), the default and the help (the field's `Meta(description=)`). A
field that is itself a Struct (`options: JobOptions | None`) is flattened: each
of its fields is an option, its flag prefixed with the field's name
(`--backoff-kind`), and the given ones make up the Struct. The command says only
which fields are positional and how a field is shown where the derived form is
not enough (`Shown`: a metavar, an env var, an older flag kept as an alias, a
type of the command line's own such as a duration).

An int whose type has no range is taken as any whole number, also in exponent
form (`1e23`): its bounds are the operation's to check, so a value out of them
reaches the operation and its refusal is audited. A range in the type is
click's to check.

The command's function gets the input already built: only the fields the user
gave (the operation's defaults apply to the rest), validated by the executor's
own decoder before any store is opened, so a value the operation's type refuses
is one line and nothing is written; the audited call then runs it (decision 0019).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
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


class NotANumber(UserError):
    """Text given to an option that takes a whole number or a duration is neither."""


def _flag(param: click.Parameter | None) -> str:
    return param.opts[0] if param is not None and param.opts else "value"


class JsonText(click.ParamType):
    """A JSON value given as text (a field whose type is no scalar: Any, a dict, a list of Structs)."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default, already a value
        raw = value.encode("utf-8", "surrogatepass")
        if nesting_depth_over(raw):  # the decoder would recurse past Python's limit
            raise NotJson(f"{_flag(param)} is JSON nested deeper than {MAX_NESTING} levels")
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            detail = str(exc).removeprefix("JSON is malformed: ")
            raise NotJson(f"{_flag(param)} is not JSON (malformed JSON: {detail})") from None


class WholeNumber(click.ParamType):
    """An integer of any size, also in exponent form when whole (`1e23`): a huge
    value reaches the operation's own bounds (its refusal audited) instead of
    click's usage block. Text that is no whole number is one line."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        try:
            number: Decimal | None = Decimal(text)
        except InvalidOperation:
            number = None
        # 40 characters at most: Decimal reads a long text in quadratic time
        if number is None or not number.is_finite() or number != number.to_integral_value() or len(text) > 40:
            raise NotANumber(f"{_flag(param)} must be a whole number, got {text!r}")
        return int(number)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_duration_ms(text: str) -> int:
    """'500ms', '30s', '15m', '12h', '7d', '2w' (a bare number is seconds), in ms."""
    match = _DURATION.match(text)
    if not match:
        raise NotANumber(f"not a duration: {text!r} (try 30s, 15m, 12h, 7d)")
    try:
        return int(float(match.group(1)) * _UNIT_MS[match.group(2) or "s"])
    except OverflowError:
        raise NotANumber(f"duration {text!r} is too long") from None


class DurationMs(click.ParamType):
    """A duration given as `30s`, `15m`, `12h`, `7d` (a bare number is seconds),
    for a field that counts milliseconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        return value if isinstance(value, int) else parse_duration_ms(str(value))


JSON = JsonText()
WHOLE = WholeNumber()
DURATION_MS = DurationMs()


@dataclass(frozen=True)
class ValueFlag:
    """A flag that gives a Literal field one value: `--promote` for verdict "promoted"."""

    flag: str
    value: str
    help: str | None = None


@dataclass(frozen=True)
class Shown:
    """How one field is shown where the derived form is not enough. A nested
    field is named by its path: `"options.backoff.kind"`."""

    metavar: str | None = None
    envvar: str | None = None
    help: str | None = None  # instead of the field's description
    aliases: tuple[str, ...] = ()  # older flag names, kept because README and tests use them
    values: tuple[ValueFlag, ...] = ()
    choices: Sequence[str] | None = None  # a str field whose values the library lists (recall's MODES)
    flag: str | None = None  # instead of the derived flag, where the field's name would mislead
    type: click.ParamType | None = None  # the command line's own form of the value (a duration)
    split: str | None = None  # a repeated field's values may also come joined by this (`--tools a,b`)
    prefix: str | None = None  # a Struct field's: what its fields' flags begin with (default `name-`)


@dataclass(frozen=True)
class Leaf:
    """One field that is a parameter: a field of the input, or of a Struct in it."""

    path: tuple[str, ...]  # the field names, outermost first
    keys: tuple[str, ...]  # their names in the input (the encode names)
    field: mi.Field
    required: bool  # it is, and so is every Struct it is in
    flag: str
    dest: str  # the parameter's name (the field's name, after its Structs' prefixes)
    shown: Shown


@dataclass(frozen=True)
class OperatorCall:
    """One operation's input, built and validated from the command line, ready to run
    as the operator: `run()` opens the store and calls it (gormes/cli/ops.py);
    `on(door)` calls it through a door the command already holds."""

    obj: Any  # the command's Config (gormes/cli/main.py)
    spec: OperationSpec
    value: Any

    def run(self, **door_options: Any) -> Any:
        """A command whose operation writes nothing creates no database: on a path
        where there is none it says so (a mistyped `--db` is not an empty ledger)."""
        from gormes.cli.ops import operator_call  # lazy: the executor and registry load only to run one

        door_options.setdefault("create", self.spec.creates_database)
        return operator_call(self.obj, self.spec.name, self.value, **door_options)

    async def on(self, door: Any) -> Any:
        return await door.call(self.spec.name, self.value)


class OperationCommand(click.Command):
    """A command that is exactly one operation; `spec` is the one its fields come
    from, `fields` the path of the field each derived parameter gives."""

    def __init__(self, *args: Any, spec: OperationSpec, leaves: Sequence[Leaf], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = spec
        self.leaves = tuple(leaves)
        self.fields = {leaf.dest: leaf.path for leaf in leaves}


def spec_named(specs: Sequence[OperationSpec], name: str) -> OperationSpec:
    """The spec called `name` in a tools module's SPECS (the objects the default
    registry holds: reading one module's is cheaper than building the registry)."""
    return next(spec for spec in specs if spec.name == name)


def operation_command(
    group: click.Group | None, name: str, spec: OperationSpec, *, arguments: Sequence[str] = (),
    shown: Mapping[str, Shown] | None = None,
) -> Callable[[Callable[..., Any]], OperationCommand]:
    """Make `fn(call, **its own options)` command `name` of `group` (None: a command
    of no group, `gormes run`): `call` is an `OperatorCall` of `spec` with the input
    built from the derived parameters (`arguments`: the fields taken by position, in
    this order). `fn`'s own click options (`--json`) stay its."""
    leaves = field_leaves(spec.input_type, arguments=arguments, shown=shown)

    def decorate(fn: Callable[..., Any]) -> OperationCommand:
        derived = leaf_params(leaves, arguments)
        own = list(reversed(getattr(fn, "__click_params__", [])))
        clash = {p.name for p in own} & {leaf.dest for leaf in leaves}
        if clash:
            raise ValueError(f"{name}'s own options {', '.join(sorted(clash))} are fields of {spec.name}")

        @functools.wraps(fn)
        def callback(**kwargs: Any) -> Any:
            ctx = click.get_current_context()
            given = {leaf.dest: kwargs.pop(leaf.dest) for leaf in leaves}
            return fn(OperatorCall(ctx.obj, spec, input_value(spec, leaves, given, ctx, derived)), **kwargs)

        command = OperationCommand(
            name, callback=callback, params=[*derived, *own], help=inspect.getdoc(fn), spec=spec, leaves=leaves,
        )
        if group is not None:
            group.add_command(command)
        return command

    return decorate


def field_leaves(
    input_type: type, *, arguments: Sequence[str] = (), shown: Mapping[str, Shown] | None = None,
) -> list[Leaf]:
    """Every field of `input_type` that is a parameter, a Struct's fields in its place."""
    shown = dict(shown or {})
    top = mi.type_info(input_type).fields
    unknown = sorted((set(arguments) | set(shown)) - set(_paths(top)))
    if unknown:
        raise ValueError(f"{input_type.__name__} has no field {', '.join(unknown)}")
    leaves = list(_walk(top, (), (), "", True, shown, set(arguments)))
    by_dest: dict[str, Leaf] = {}
    for leaf in leaves:
        other = by_dest.setdefault(leaf.dest, leaf)
        if other is not leaf:
            raise ValueError(f"fields {'.'.join(other.path)} and {'.'.join(leaf.path)} are both `{leaf.dest}`: "
                             "give one a prefix")
    return leaves


def _paths(fields: Sequence[mi.Field], path: str = "") -> Iterator[str]:
    for field in fields:
        here = path + field.name
        yield here
        kind = _parts(field.type)[0]
        if isinstance(kind, mi.StructType):
            yield from _paths(kind.fields, here + ".")


def _walk(fields: Sequence[mi.Field], path: tuple[str, ...], keys: tuple[str, ...], prefix: str,
          required: bool, shown: Mapping[str, Shown], arguments: set[str]) -> Iterator[Leaf]:
    for field in fields:
        here, at = (*path, field.name), (*keys, field.encode_name)
        how = shown.get(".".join(here), Shown())
        kind = _parts(field.type)[0]
        if isinstance(kind, mi.StructType) and ".".join(here) not in arguments:
            inner = how.prefix if how.prefix is not None else f"{prefix}{field.name}-"
            yield from _walk(kind.fields, here, at, inner, required and field.required, shown, arguments)
            continue
        name = prefix + field.name.replace("_", "-")
        yield Leaf(path=here, keys=at, field=field, required=required and field.required,
                   flag=how.flag or f"--{name}", dest=name.replace("-", "_"), shown=how)


def leaf_params(leaves: Sequence[Leaf], arguments: Sequence[str] = ()) -> list[click.Parameter]:
    """One click parameter per leaf (plus a field's value flags): the `arguments`
    first, in their order, then an option per other field."""
    by_path = {".".join(leaf.path): leaf for leaf in leaves}
    params: list[click.Parameter] = [_argument(by_path[name]) for name in arguments]
    for leaf in leaves:
        if ".".join(leaf.path) not in arguments:
            params += _options(leaf)
    return params


def input_value(spec: OperationSpec, leaves: Sequence[Leaf], given: Mapping[str, Any], ctx: click.Context,
                params: Sequence[click.Parameter]) -> Any:
    """`spec`'s input from the fields the user gave (on the command line or in the
    environment), validated as the executor validates it."""
    chosen: dict[str, Any] = {}
    for leaf in leaves:
        if ctx.get_parameter_source(leaf.dest) in (None, ParameterSource.DEFAULT):
            if leaf.required:
                raise _missing(leaf.dest, params, ctx)
            continue
        value = given[leaf.dest]
        if isinstance(value, tuple):
            value = _joined(value, leaf.shown.split)
        into = chosen
        for key in leaf.keys[:-1]:
            into = into.setdefault(key, {})
        into[leaf.keys[-1]] = value
    return decode_input(spec, chosen)


def _joined(values: tuple[Any, ...], split: str | None) -> list[Any]:
    """A repeated option's values; with `split`, each may hold several (empty ones dropped)."""
    if split is None:
        return list(values)
    return [part.strip() for value in values for part in value.split(split) if part.strip()]


def _missing(name: str, params: Sequence[click.Parameter], ctx: click.Context) -> click.UsageError:
    """A required field that no flag gave (one whose value flags keep click from requiring it)."""
    flags = [opt for p in params if p.name == name for opt in p.opts]
    return click.UsageError(f"Missing option '{flags[0]}'" + (f" (or {', '.join(flags[1:])})" if flags[1:] else ""),
                            ctx=ctx)


def _argument(leaf: Leaf) -> click.Argument:
    field, shown = leaf.field, leaf.shown
    kind, _, _ = _parts(field.type)
    many = _repeats(kind)
    return click.Argument(
        [leaf.dest], type=_click_type(_parts(kind.item_type)[0] if many else kind, shown),
        required=leaf.required, nargs=-1 if many else 1, metavar=shown.metavar or leaf.dest.upper(),
    )


def _options(leaf: Leaf) -> list[click.Option]:
    field, shown, flag = leaf.field, leaf.shown, leaf.flag
    kind, description, _ = _parts(field.type)
    help_text = _help(shown.help or description, shown.envvar, _repeats(kind), shown.split)
    default = field.default if _shows(field.default) else None
    common: dict[str, Any] = {"help": help_text, "envvar": shown.envvar, "metavar": shown.metavar}
    if isinstance(kind, mi.BoolType):
        decls = [f"{flag}/--no-{flag[2:]}" if field.default is True else flag, *shown.aliases, leaf.dest]
        options = [click.Option(decls, is_flag=True, default=field.default is True, **common)]
    else:
        many = _repeats(kind)
        options = [click.Option(
            [flag, *shown.aliases, leaf.dest],
            type=_click_type(_parts(kind.item_type)[0] if many else kind, shown), multiple=many,
            default=default, show_default=default is not None,
            required=leaf.required and not shown.values, **common,
        )]
    options += [click.Option([v.flag, leaf.dest], flag_value=v.value, help=v.help or f"Same as {flag} {v.value}.")
                for v in shown.values]
    return options


def _help(text: str | None, envvar: str | None, repeats: bool, split: str | None = None) -> str | None:
    """The field's help with what the command line adds: `repeatable`, the env var."""
    again = (f"repeatable, or several joined by {split!r}" if split else "repeatable") if repeats else None
    notes = [note for note in (again, f"env {envvar}" if envvar else None) if note]
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
    if shown.type is not None:
        return shown.type
    if shown.choices is not None:
        return click.Choice(list(shown.choices))
    if isinstance(kind, mi.StrType):
        return click.STRING
    if isinstance(kind, mi.BoolType):
        return click.BOOL
    if isinstance(kind, mi.IntType):
        return _range(click.IntRange, WHOLE, kind)
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
