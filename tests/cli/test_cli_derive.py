"""The commands that are exactly one operation take their options from its input type
(gormes/cli/derive.py): a field added to the operation is an option of its command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import click
import msgspec
import msgspec.inspect
import pytest
from click.testing import CliRunner

import gormes.cli.main as cli_main
from gormes.cli import derive
from gormes.cli.derive import OperationCommand, OperatorCall, Shown, ValueFlag, operation_command
from gormes.cli.main import COMMANDS, cli
from gormes.ops.spec import InvalidOperationInput, OperationSpec
from gormes.tools.builtin import default_registry

# Every command that is one operation, and that operation. A command listed here that
# stops deriving its options, or a derived one missing here, fails the test below.
ONE_OPERATION = {
    "cron add": "cron.add", "cron pause": "cron.pause", "cron resume": "cron.resume",
    "cron remove": "cron.remove",
    "memory add-fact": "memory.add_fact", "memory add-entity": "memory.add_entity",
    "memory relate": "memory.relate", "memory review": "memory.review", "memory forget": "memory.forget",
    "memory mirror": "memory.mirror", "projections rebuild": "projections.rebuild",
    "skills promote": "skills.promote", "skills feedback": "skills.feedback",
    "jobs submit": "job.submit", "jobs cancel": "job.cancel", "jobs pause": "job.pause",
    "jobs resume": "job.resume", "jobs retry": "job.retry", "jobs replay": "job.replay",
    "jobs send": "job.send", "jobs prune": "job.prune",
    "run": "run.start", "runs send": "run.send", "runs resume": "run.resume", "fork": "run.fork",
    "budget set": "budget.set", "budget raise": "budget.raise", "budget show": "budget.show",
    "budget list": "budget.list",
    "approve": "approval.approve", "deny": "approval.deny", "approvals list": "approval.list",
}


def every_command() -> dict[str, click.Command]:
    ctx = click.Context(cli, info_name="gormes")
    found: dict[str, click.Command] = {}
    for name in sorted(COMMANDS):
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            found |= {f"{name} {sub}": command.get_command(ctx, sub) for sub in command.list_commands(ctx)}
        else:
            found[name] = command
    return found


def test_the_commands_that_are_one_operation_derive_their_options():
    derived = {path: c.spec.name for path, c in every_command().items() if isinstance(c, OperationCommand)}
    assert derived == ONE_OPERATION


@pytest.mark.parametrize("path", sorted(ONE_OPERATION))
def test_every_field_of_the_registered_operation_is_a_parameter(path: str):
    command = every_command()[path]
    assert isinstance(command, OperationCommand)
    registered = default_registry().get(ONE_OPERATION[path])
    assert registered is not None and registered.input_type is command.spec.input_type
    names = {param.name for param in command.params}
    given = {command.fields[name] for name in names if name in command.fields}
    # a field is given by its own parameter, or (a Struct) by one for each of its fields
    missing = [".".join(leaf) for leaf in leaf_fields(registered.input_type)
               if not any(leaf[:n] in given for n in range(1, len(leaf) + 1))]
    assert missing == [], f"`gormes {path}` has no option for {missing}"


def leaf_fields(kind: type, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every field of `kind` that is no Struct, looking into the Structs."""
    found = []
    for field in msgspec.inspect.type_info(kind).fields:
        inner = struct_in(field.type)
        found += leaf_fields(inner, (*path, field.name)) if inner else [(*path, field.name)]
    return found


def struct_in(kind: msgspec.inspect.Type) -> type | None:
    """The Struct class `kind` is (under its Meta and `| None`), if it is one."""
    if isinstance(kind, msgspec.inspect.Metadata):
        return struct_in(kind.type)
    if isinstance(kind, msgspec.inspect.UnionType):
        inner = [struct_in(t) for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)]
        return inner[0] if len(inner) == 1 else None
    return kind.cls if isinstance(kind, msgspec.inspect.StructType) else None


# -- derivation, on an operation made up here -----------------------------------------


class Input(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    count: Annotated[int, msgspec.Meta(ge=1, le=9, description="How many.")] = 3
    ratio: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 1.0
    loud: bool = False
    tidy: bool = True
    tags: list[str] = []
    kind: Literal["a", "b"] = "a"
    data: Any = None
    label: Annotated[str, msgspec.Meta(description="A label.")] | None = None


class Output(msgspec.Struct):
    ok: bool


async def _handler(ctx: Any, value: Input) -> Output:
    return Output(ok=True)


SPEC = OperationSpec(name="test.derive", description="A made-up operation.", input_type=Input,
                     output_type=Output, handler=_handler, trust=frozenset({"operator"}), audit_kind="test")


def made_up(**shown: Shown) -> tuple[OperationCommand, list[OperatorCall]]:
    seen: list[OperatorCall] = []
    group = click.Group("g")

    @operation_command(group, "do", SPEC, arguments=("name",), shown=shown)
    @click.option("--json", "as_json", is_flag=True)
    def do(call: OperatorCall, as_json: bool) -> None:
        """Do it."""
        seen.append(call)

    return do, seen


def param(command: click.Command, name: str) -> click.Parameter:
    return next(p for p in command.params if p.name == name and p.opts[0] == "--" + name.replace("_", "-"))


def test_each_field_becomes_the_parameter_its_type_says():
    command, _ = made_up()
    assert isinstance(command.params[0], click.Argument) and command.params[0].name == "name"
    count = param(command, "count")
    assert isinstance(count.type, click.IntRange) and (count.type.min, count.type.max) == (1, 9)
    assert count.default == 3 and count.help == "How many."
    ratio = param(command, "ratio")
    assert isinstance(ratio.type, click.FloatRange) and (ratio.type.min, ratio.type.max) == (0.0, 1.0)
    assert param(command, "loud").is_flag and param(command, "loud").secondary_opts == []
    assert param(command, "tidy").secondary_opts == ["--no-tidy"]
    assert param(command, "tags").multiple
    assert param(command, "tags").help == "(repeatable)"
    assert list(param(command, "kind").type.choices) == ["a", "b"]
    assert param(command, "data").type is derive.JSON
    assert param(command, "label").help == "A label." and not param(command, "label").required
    assert [p.name for p in command.params][-1] == "as_json"  # the command's own option stays


def test_the_input_holds_what_was_given_and_the_operation_defaults_the_rest():
    command, seen = made_up()
    result = CliRunner().invoke(command, ["x", "--count", "5", "--loud", "--no-tidy", "--tags", "p", "--tags", "q",
                                          "--kind", "b", "--data", '{"k": [1]}', "--json"])
    assert result.exit_code == 0, result.output
    (call,) = seen
    assert call.spec is SPEC
    assert call.value == Input(name="x", count=5, loud=True, tidy=False, tags=["p", "q"], kind="b", data={"k": [1]})
    seen.clear()
    assert CliRunner().invoke(command, ["y"]).exit_code == 0
    assert seen[0].value == Input(name="y")


def test_fields_not_given_are_left_out_of_the_input(monkeypatch):
    passed: list[dict] = []
    real = derive.decode_input
    monkeypatch.setattr(derive, "decode_input", lambda spec, raw: passed.append(raw) or real(spec, raw))
    command, _ = made_up()
    assert CliRunner().invoke(command, ["x", "--ratio", "0.5"]).exit_code == 0
    assert passed == [{"name": "x", "ratio": 0.5}]


def test_out_of_range_and_unknown_choices_are_refused_by_click():
    command, seen = made_up()
    for args in (["x", "--count", "10"], ["x", "--ratio", "1.5"], ["x", "--kind", "c"]):
        assert CliRunner().invoke(command, args).exit_code == 2
    assert seen == []


def test_input_the_type_refuses_never_reaches_the_command():
    command, seen = made_up()
    result = CliRunner().invoke(command, [""])
    assert isinstance(result.exception, InvalidOperationInput)
    assert "length >= 1" in str(result.exception)
    assert seen == []


@pytest.mark.parametrize(("text", "message"), [("{", "--data is not JSON"),
                                               ("[" * 100 + "]" * 100, "--data is JSON nested deeper than 64")])
def test_json_that_does_not_decode_is_one_clear_error(text: str, message: str):
    command, seen = made_up()
    result = CliRunner().invoke(command, ["x", "--data", text])
    assert isinstance(result.exception, derive.NotJson) and message in str(result.exception)
    assert seen == []


def test_aliases_envvars_and_value_flags():
    command, seen = made_up(label=Shown(aliases=("--tag-line",), envvar="T_LABEL", metavar="L"),
                            kind=Shown(values=(ValueFlag("--bee", "b"),)))
    assert param(command, "label").opts == ["--label", "--tag-line"]
    assert param(command, "label").help == "A label (env T_LABEL)."
    assert CliRunner().invoke(command, ["x", "--tag-line", "hi", "--bee"]).exit_code == 0
    assert (seen[0].value.label, seen[0].value.kind) == ("hi", "b")
    assert CliRunner().invoke(command, ["x"], env={"T_LABEL": "from env"}).exit_code == 0
    assert seen[1].value.label == "from env"


def test_a_shown_field_the_operation_does_not_have_is_an_error():
    with pytest.raises(ValueError, match="has no field nmae"):
        operation_command(click.Group("g"), "do", SPEC, arguments=("nmae",))


# -- through the real command line -----------------------------------------------------


def test_a_review_without_a_verdict_names_its_flags_and_opens_nothing(tmp_path: Path, capsys):
    db = tmp_path / "gormes.db"
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["--db", str(db), "memory", "review", "r_1"])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "Missing option '--verdict' (or --promote, --reject)" in line
    assert not db.exists()


def test_a_bad_schedule_name_is_refused_before_the_database_is_opened(tmp_path: Path, capsys):
    db = tmp_path / "gormes.db"
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["--db", str(db), "cron", "add", "bad!", "--schedule", "@daily", "--job", "echo"])
    assert exit_.value.code == 2
    assert "bad schedule name 'bad!'" in capsys.readouterr().err
    assert not db.exists()


# -- a Struct field is flattened into options ----------------------------------------


class Retry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: Literal["x", "y"] = "x"
    wait_ms: int = 100


class Knobs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    size: int = 1
    retry: Retry = Retry()
    note: str | None = None


class Pair(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    left: str


class NestedInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    knobs: Knobs | None = None
    older_than_ms: Annotated[int, msgspec.Meta(ge=0)] = 0
    tools: list[str] | None = None


class NeedsPair(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pair: Pair


def spec_of(input_type: type) -> OperationSpec:
    return OperationSpec(name="test.nested", description="A made-up operation.", input_type=input_type,
                         output_type=Output, handler=_handler, trust=frozenset({"operator"}), audit_kind="test")


def nested(input_type: type = NestedInput, **shown: Shown) -> tuple[OperationCommand, list[OperatorCall]]:
    seen: list[OperatorCall] = []

    @operation_command(click.Group("g"), "do", spec_of(input_type), shown={k.replace("__", "."): v
                                                                         for k, v in shown.items()})
    def do(call: OperatorCall) -> None:
        seen.append(call)

    return do, seen


def test_a_struct_fields_fields_are_options_prefixed_with_its_name():
    command, _ = nested()
    flags = {p.name: p.opts[0] for p in command.params}
    assert flags == {"name": "--name", "knobs_size": "--knobs-size", "knobs_retry_kind": "--knobs-retry-kind",
                     "knobs_retry_wait_ms": "--knobs-retry-wait-ms", "knobs_note": "--knobs-note",
                     "older_than_ms": "--older-than-ms", "tools": "--tools"}
    assert command.fields["knobs_retry_wait_ms"] == ("knobs", "retry", "wait_ms")
    assert list(param(command, "knobs_retry_kind").type.choices) == ["x", "y"]
    assert param(command, "knobs_retry_wait_ms").default == 100  # the Struct's default, shown


def test_a_prefix_of_its_own_and_the_struct_built_of_what_was_given():
    command, seen = nested(knobs=Shown(prefix=""))
    assert CliRunner().invoke(command, ["--name", "n", "--size", "2", "--retry-wait-ms", "5"]).exit_code == 0
    assert seen[0].value == NestedInput(name="n", knobs=Knobs(size=2, retry=Retry(wait_ms=5)))
    assert CliRunner().invoke(command, ["--name", "n"]).exit_code == 0
    assert seen[1].value == NestedInput(name="n")  # nothing given: no Struct at all


def test_a_nested_field_is_shown_by_its_path():
    command, _ = nested(knobs__retry__kind=Shown(aliases=("--shape",), help="The shape."))
    shape = next(p for p in command.params if p.name == "knobs_retry_kind")
    assert shape.opts == ["--knobs-retry-kind", "--shape"] and shape.help == "The shape."
    with pytest.raises(ValueError, match="has no field knobs.nope"):
        nested(knobs__nope=Shown())


def test_an_int_with_no_range_is_any_whole_number_and_its_bounds_are_the_operations():
    command, seen = nested()
    assert CliRunner().invoke(command, ["--name", "n", "--knobs-size", "1e23"]).exit_code == 0
    assert seen[0].value.knobs.size == 10**23
    result = CliRunner().invoke(command, ["--name", "n", "--knobs-size", "1.5"])
    assert isinstance(result.exception, derive.NotANumber)
    assert "--knobs-size must be a whole number, got '1.5'" in str(result.exception)
    assert len(seen) == 1


def test_a_flag_and_a_type_of_the_command_lines_own():
    command, seen = nested(older_than_ms=Shown(flag="--older-than", type=derive.DURATION_MS))
    assert param_named(command, "older_than_ms").opts == ["--older-than"]
    assert CliRunner().invoke(command, ["--name", "n", "--older-than", "2m"]).exit_code == 0
    assert seen[0].value.older_than_ms == 120_000
    assert CliRunner().invoke(command, ["--name", "n", "--older-than", "5"]).exit_code == 0
    assert seen[1].value.older_than_ms == 5_000  # a bare number is seconds
    result = CliRunner().invoke(command, ["--name", "n", "--older-than", "soon"])
    assert isinstance(result.exception, derive.NotANumber) and "not a duration: 'soon'" in str(result.exception)


def test_a_repeated_field_split_on_a_separator():
    command, seen = nested(tools=Shown(split=","))
    assert CliRunner().invoke(command, ["--name", "n", "--tools", "a, b", "--tools", "c"]).exit_code == 0
    assert seen[0].value.tools == ["a", "b", "c"]
    assert CliRunner().invoke(command, ["--name", "n", "--tools", ""]).exit_code == 0
    assert seen[1].value.tools == []  # given empty: no tools, not the default


def test_a_required_field_of_a_required_struct_is_required():
    command, seen = nested(NeedsPair)
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 2 and "Missing option '--pair-left'" in result.output
    assert CliRunner().invoke(command, ["--pair-left", "l"]).exit_code == 0
    assert seen[0].value == NeedsPair(pair=Pair(left="l"))


def test_two_fields_that_would_be_one_parameter_are_an_error():
    class Clash(msgspec.Struct, kw_only=True):
        size: int = 0
        knobs: Knobs | None = None

    with pytest.raises(ValueError, match="fields size and knobs.size are both `size`"):
        nested(Clash, knobs=Shown(prefix=""))


def test_an_option_of_the_commands_own_may_not_be_a_field():
    with pytest.raises(ValueError, match="own options name"):
        @operation_command(click.Group("g"), "do", SPEC)
        @click.option("--name")
        def do(call: OperatorCall, name: str) -> None:
            pass


def param_named(command: click.Command, name: str) -> click.Parameter:
    return next(p for p in command.params if p.name == name)


def test_jobs_submit_shows_each_job_options_range_from_the_library():
    from gormes.actors.jobs.vocabulary import OPTION_BOUNDS

    command = every_command()["jobs submit"]
    assert isinstance(command, OperationCommand)
    by_path = {".".join(path): name for name, path in command.fields.items()}
    for field, bounds in OPTION_BOUNDS.items():
        assert str(bounds) in param_named(command, by_path[f"options.{field}"]).help, field
