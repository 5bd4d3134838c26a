"""A database's own error that no gormes code translated still ends as one line."""

from __future__ import annotations

import os
import sqlite3

import psycopg
import pytest

import gormes.cli.main as cli_main
from gormes.errors import StoreError


@pytest.mark.parametrize(
    ("raised", "line"),
    [
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command\nDETAIL"),
         "gormes: error: database error: terminating connection due to administrator command"),
        (sqlite3.OperationalError("disk I/O error"), "gormes: error: database error: disk I/O error"),
        (ExceptionGroup("nursery", [StoreError("lost the server")]), "gormes: error: lost the server"),
    ],
)
def test_a_database_error_is_one_line_and_exit_1(monkeypatch, capsys, raised, line):
    def fail(**_: object) -> None:
        raise raised

    monkeypatch.setattr(cli_main.cli, "main", fail)
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["events"])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.splitlines() == [line]


def test_any_other_error_is_not_hidden(monkeypatch):
    def fail(**_: object) -> None:
        raise ValueError("a bug of ours")

    monkeypatch.setattr(cli_main.cli, "main", fail)
    with pytest.raises(ValueError, match="a bug of ours"):
        cli_main.main(["events"])


def test_a_closed_pipe_is_still_a_quiet_exit_0(monkeypatch, capsys):
    # Output piped into `head`: the database-error line must not swallow this case.
    def fail(**_: object) -> None:
        raise BrokenPipeError

    monkeypatch.setattr(cli_main.cli, "main", fail)
    monkeypatch.setattr(cli_main.os, "dup2", lambda *_: None)
    with open(os.devnull, "w") as stdout:  # a real file descriptor, as a pipe has
        monkeypatch.setattr(cli_main.sys, "stdout", stdout)
        with pytest.raises(SystemExit) as exit_:
            cli_main.main(["events"])
    assert exit_.value.code == 0
    assert capsys.readouterr().err == ""
