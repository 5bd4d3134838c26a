"""Operations, replay, disk, memory and skills checks."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import msgspec
from doctor_helpers import T0, append, check, doctor, fresh, sql

from gormes.actors.runs.context import run_handlers
from gormes.events.codec import default_codec
from gormes.events.runs import RunClockRead, RunCompleted, RunStarted
from gormes.health import GIB, MIB, DoctorContext, Thresholds
from gormes.health.replay import unreplayable_runs
from gormes.tools.builtin import default_registry
from gormes.ops.spec import OperationSpec


class _In(msgspec.Struct):
    text: str = ""


class _Out(msgspec.Struct):
    ok: bool = True


async def _handler(ctx, value):
    return _Out()


def test_the_real_default_registry_passes(db_path: Path):
    report = doctor(fresh(db_path))
    assert check(report, "operations.specs").status == "ok"
    assert check(report, "operations.prompt_visibility").status == "ok"


def test_a_bad_spec_that_bypassed_registration_fails_both_checks(db_path: Path):
    # OperationSpec itself validates nothing; Registry.register would refuse this one.
    bad = OperationSpec(
        name="danger.zone", description="operator only, yet offered to models", input_type=int,
        output_type=_Out, handler=_handler, trust=frozenset({"operator"}), audit_kind="",
        prompt_visible=True,
    )
    report = doctor(fresh(db_path), operations_=[*default_registry().list(), bad])
    specs = check(report, "operations.specs")
    assert specs.status == "fail"
    assert "danger.zone: no input schema" in specs.message and "no audit kind" in specs.message
    visible = check(report, "operations.prompt_visibility")
    assert visible.status == "fail" and "danger.zone" in visible.message
    assert report.status == "error"


def _started(run_id: str, handler: str = "agent") -> RunStarted:
    return RunStarted(run_id=run_id, handler=handler, handler_version="x")


def test_a_complete_run_is_replayable(db_path: Path):
    append(db_path, "run-r1", [_started("r1"), RunClockRead(seq=1, value=1.0), RunCompleted()])
    result = check(doctor(db_path), "replay.runs")
    assert result.status == "ok" and "1 recorded run(s)" in result.message


def test_runs_that_cannot_be_replayed_say_why(db_path: Path):
    append(db_path, "run-gap", [_started("gap"), RunClockRead(seq=1, value=1.0), RunClockRead(seq=3, value=2.0)])
    append(db_path, "run-nohandler", [_started("nohandler", handler="who.knows")])
    append(db_path, "run-headless", [RunClockRead(seq=1, value=1.0)])
    append(db_path, "run-alien", [_started("alien")])
    sql(db_path, "INSERT INTO events(stream, version, type, data, recorded_at) "
                 "VALUES ('run-alien', 2, 'run.teleported', '{}', 0)")
    result = check(doctor(db_path), "replay.runs")
    assert result.status == "warn"
    assert result.message.startswith("4 run(s) cannot be replayed exactly")
    # every reason, not only the three the message has room for
    conn = sqlite3.connect(db_path)
    try:
        why = unreplayable_runs(DoctorContext(
            path=db_path, conn=conn, now=T0, thresholds=Thresholds(), codec=default_codec,
            operations=[], run_handlers=run_handlers,
        ))
    finally:
        conn.close()
    assert "gaps or repeats" in why["gap"][0]
    assert why["nohandler"] == ["its handler 'who.knows' is not registered here"]
    assert why["headless"] == ["begins with run.clock_read, not run.started"]
    assert "run.teleported v1 this gormes cannot read" in why["alien"][0]


def _statvfs(free: int, total: int):
    block = 4096

    def statvfs(path: str) -> os.statvfs_result:
        assert os.path.isdir(path)
        return os.statvfs_result((block, block, total // block, free // block, free // block,
                                  1000, 1000, 1000, 0, 255))

    return statvfs


def test_disk_thresholds(db_path: Path):
    fresh(db_path)

    def status(free: int, total: int) -> str:
        return check(doctor(db_path, statvfs=_statvfs(free, total)), "disk.free").status

    assert status(50 * MIB, 100 * GIB) == "fail"
    assert status(500 * MIB, 100 * GIB) == "warn"  # under 1 GiB
    assert status(5 * GIB, 100 * GIB) == "warn"  # under 10 %
    assert status(5 * GIB, 20 * GIB) == "ok"


MEMORY_CHECKS = ("memory.semantic", "memory.extraction", "memory.dead_letters")


def test_memory_and_skills_say_not_installed_when_they_are_not(db_path: Path):
    report = doctor(fresh(db_path), modules=lambda name: False)
    for name in (*MEMORY_CHECKS, "skills.check"):
        assert check(report, name).status == "ok"
        assert "not installed in this version" in check(report, name).message


def test_a_partly_installed_memory_is_a_warning(db_path: Path):
    report = doctor(fresh(db_path), modules=lambda name: name == "gormes.recall")
    for name in MEMORY_CHECKS:
        result = check(report, name)
        assert result.status == "warn" and "gormes.events.memory missing" in result.message


def test_events_of_a_part_this_gormes_lacks_are_warnings(db_path: Path):
    sql(fresh(db_path), "INSERT INTO events(stream, version, type, data, recorded_at) "
                        "VALUES ('memory-x', 1, 'memory.fact_added', '{}', 0)")
    sql(db_path, "INSERT INTO events(stream, version, type, data, recorded_at) "
                 "VALUES ('skills-x', 1, 'skill.selected', '{}', 0)")
    report = doctor(db_path, modules=lambda name: False)
    for name in MEMORY_CHECKS:
        result = check(report, name)
        assert result.status == "warn" and "1 memory event(s)" in result.message
    result = check(report, "skills.check")
    assert result.status == "warn" and "1 skill event(s)" in result.message
