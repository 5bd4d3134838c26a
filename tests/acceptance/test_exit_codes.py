"""Every bad input is one `gormes: error:` line, and exit codes mean one thing
each: 2 bad input or not found, 1 a divergence or a failed check (issue 19, item 7).
Through the real CLI, on a real (empty) database."""

from __future__ import annotations

import pytest
from cli_helpers import assert_one_line_error, run_gormes, write_notes

NOT_FOUND = {
    "fork": (("fork", "NOSUCH", "--at", "1"), "no run 'NOSUCH'"),
    "runs resume": (("runs", "resume", "NOSUCH"), "no run 'NOSUCH'"),
    "replay": (("replay", "NOSUCH"), "no run 'NOSUCH'"),
    "runs show": (("runs", "show", "NOSUCH"), "no run with id 'NOSUCH'"),
    "run, unknown handler": (("run", "no_such_handler", "--input", "{}"), "no run handler named 'no_such_handler'"),
    "jobs get": (("jobs", "get", "NOSUCH"), "no job with id 'NOSUCH'"),
    "cron pause": (("cron", "pause", "ghost"), "no schedule named 'ghost'"),
    "cron remove": (("cron", "remove", "ghost"), "no schedule named 'ghost'"),
}


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "g.db"
    write_notes(path, [("s", "a database that exists")])
    return path


@pytest.mark.parametrize("name", list(NOT_FOUND))
def test_not_found_is_one_line_and_exit_2(db, name):
    args, says = NOT_FOUND[name]
    done = run_gormes(db, *args)
    assert says in assert_one_line_error(done)
    assert done.returncode == 2, (name, done.stderr)


@pytest.mark.parametrize("group", ["jobs", "runs", "skills", "cron"])
def test_a_group_without_a_command_is_one_line_naming_its_commands(db, group):
    done = run_gormes(db, group)
    line = assert_one_line_error(done)
    assert done.returncode == 2
    assert line.startswith("gormes: error: Missing command: one of ") and f"(see `gormes {group} --help`)" in line
    helped = run_gormes(db, group, "--help")
    assert helped.returncode == 0 and helped.stdout.startswith(f"Usage: gormes {group} ")


@pytest.mark.parametrize("args", [("events", "--limit"), ("jobs", "nosuch"), ("events", "--nosuch"),
                                  ("jobs", "submit")])
def test_click_usage_errors_are_one_line_exit_2(db, args):
    done = run_gormes(db, *args)
    line = assert_one_line_error(done)
    assert done.returncode == 2 and "Usage:" not in line
