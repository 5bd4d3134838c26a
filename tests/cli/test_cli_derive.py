"""The commands that are exactly one operation take their options from its input type
(gormes/cli/derive.py): a field added to the operation is an option of its command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import click
import msgspec
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
    "skills promote": "skills.promote", "skills feedback": "skills.feedback",
}


def every_command() -> dict[str, click.Command]:
    ctx = click.Context(cli, info_name="gormes")
    found: dict[str, click.Command] = {}
    for name in sorted(COMMANDS):
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            found |= {f"{name} {sub}": command.commands[sub] for sub in command.list_commands(ctx)}
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
    missing = [f.name for f in msgspec.structs.fields(registered.input_type) if f.name not in names]
    assert missing == [], f"`gormes {path}` has no option for {missing}"


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
