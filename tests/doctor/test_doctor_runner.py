"""The runner: overall status, exit codes, offline, crashed checks, the JSON shape."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from doctor_helpers import check, doctor, fresh

from gormes.doctor import CheckResult, DoctorReport, all_checks, exit_code, overall
from gormes.health import CATEGORIES, Check, fail, ok, warn


def _result(status: str) -> CheckResult:
    return CheckResult(name="x.y", category="store", status=status, message="m")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [(["ok", "ok"], "ok"), (["ok", "warn"], "warnings"), (["warn", "fail", "ok"], "error"), ([], "ok")],
)
def test_overall_status(statuses, expected):
    assert overall([_result(s) for s in statuses]) == expected


def test_exit_codes_are_0_0_1(db_path: Path):
    fresh(db_path)
    codes = {}
    for verdict in (ok("fine"), warn("meh", "do x"), fail("bad", "do y")):
        report = doctor(db_path, checks=[Check(name="t.t", category="store", run=lambda ctx, v=verdict: v)])
        codes[report.status] = exit_code(report)
    assert codes == {"ok": 0, "warnings": 0, "error": 1}


def test_a_fresh_database_offline_is_ok(db_path: Path):
    report = doctor(fresh(db_path), offline=True)
    assert report.status == "ok", [c for c in report.checks if c.status != "ok"]
    assert {s.name for s in report.skipped} == {c.name for c in all_checks() if c.needs_daemon}


def test_a_fresh_database_online_names_the_missing_worker(db_path: Path):
    report = doctor(fresh(db_path))
    not_ok = {c.name: c for c in report.checks if c.status != "ok"}
    assert set(not_ok) == {"workers.heartbeats"}
    assert "no live worker" in not_ok["workers.heartbeats"].message
    assert report.status == "warnings"


def test_a_check_that_raises_is_a_failure_not_a_traceback(db_path: Path):
    def broken(ctx):
        raise RuntimeError("oops")

    report = doctor(fresh(db_path), checks=[Check(name="t.broken", category="store", run=broken)])
    result = check(report, "t.broken")
    assert result.status == "fail" and "RuntimeError: oops" in result.message


def test_every_check_has_a_known_category_and_a_unique_name():
    checks = all_checks()
    assert len({c.name for c in checks}) == len(checks)
    assert {c.category for c in checks} <= set(CATEGORIES)
    assert all(c.name.startswith(c.category + ".") for c in checks)


def test_every_non_ok_result_has_a_remediation(db_path: Path):
    report = doctor(db_path)  # missing: fails
    assert all(c.remediation for c in report.checks if c.status != "ok")


def test_the_report_round_trips_as_json_with_its_schema_version(db_path: Path):
    report = doctor(fresh(db_path))
    data = msgspec.json.decode(msgspec.json.encode(report))
    assert data["schema_version"] == 1
    assert msgspec.json.decode(msgspec.json.encode(report), type=DoctorReport) == report


def test_every_check_is_documented():
    page = (Path(__file__).parents[2] / "docs" / "doctor.md").read_text()
    for c in ["store.schema", *(c.name for c in all_checks())]:
        assert f"`{c}`" in page, c
