"""`gormes cron` against a real database file, in subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import create_database, assert_one_line_error, run_gormes


def listed(db: Path) -> dict[str, dict]:
    result = run_gormes(db, "cron", "list", "--json")
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_add_list_pause_resume_remove(tmp_path: Path):
    db = tmp_path / "gormes.db"
    added = run_gormes(db, "cron", "add", "nightly", "--schedule", "0 3 * * *", "--job", "echo",
                       "--data", '{"report": "daily"}', "--queue", "reports")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("added nightly: 0 3 * * * -> echo on queue reports")
    run_gormes(db, "cron", "add", "often", "--schedule", "@hourly", "--job", "sleep")

    rows = listed(db)
    assert sorted(rows) == ["nightly", "often"]
    nightly = rows["nightly"]
    assert (nightly["schedule"], nightly["job"], nightly["queue"], nightly["status"]) == (
        "0 3 * * *", "echo", "reports", "active")
    assert nightly["data"] == {"report": "daily"}
    assert nightly["next_fire"].endswith("T03:00:00Z") and nightly["fires"] == 0
    assert rows["often"]["schedule"] == "0 * * * *"

    assert run_gormes(db, "cron", "pause", "nightly").returncode == 0
    paused = listed(db)["nightly"]
    assert paused["status"] == "paused" and paused["next_fire"] is None

    assert run_gormes(db, "cron", "resume", "nightly").returncode == 0
    assert listed(db)["nightly"]["status"] == "active"

    assert run_gormes(db, "cron", "remove", "nightly").returncode == 0
    assert sorted(listed(db)) == ["often"]

    table = run_gormes(db, "cron", "list")
    assert table.returncode == 0 and "often" in table.stdout and "nightly" not in table.stdout


def test_a_bad_schedule_is_one_line_and_exit_2(tmp_path: Path):
    db = tmp_path / "gormes.db"
    result = run_gormes(db, "cron", "add", "x", "--schedule", "61 * * * *", "--job", "echo")
    line = assert_one_line_error(result)
    assert result.returncode == 2
    assert "bad schedule '61 * * * *'" in line
    assert not db.exists()  # refused before the database was touched
    short = run_gormes(db, "cron", "add", "x", "--schedule", "* * *", "--job", "echo")
    assert short.returncode == 2 and "five fields" in assert_one_line_error(short)


def test_an_unknown_name_is_one_line_and_non_zero(tmp_path: Path):
    db = tmp_path / "gormes.db"
    for verb in ("pause", "resume", "remove"):
        result = run_gormes(db, "cron", verb, "ghost")
        assert "no schedule named 'ghost'" in assert_one_line_error(result)


def test_adding_a_name_twice_is_refused(tmp_path: Path):
    db = tmp_path / "gormes.db"
    run_gormes(db, "cron", "add", "a", "--schedule", "* * * * *", "--job", "echo")
    again = run_gormes(db, "cron", "add", "a", "--schedule", "* * * * *", "--job", "echo")
    assert "already exists" in assert_one_line_error(again)
    assert again.returncode == 2


def test_bad_data_is_refused(tmp_path: Path):
    db = tmp_path / "gormes.db"
    result = run_gormes(db, "cron", "add", "a", "--schedule", "* * * * *", "--job", "echo",
                        "--data", "{")
    assert "--data is not JSON" in assert_one_line_error(result)


def test_an_empty_list(tmp_path: Path):
    db = tmp_path / "gormes.db"
    create_database(db)
    assert listed(db) == {}
    assert run_gormes(db, "cron", "list").stdout.strip() == "no schedules"
