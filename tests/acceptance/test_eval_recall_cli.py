"""`gormes eval recall` through the real CLI: the shipped fixtures, JSON for CI,
a table for people, and bad input as one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import REPO, assert_one_line_error, run_gormes

SHIPPED = REPO / "evals" / "recall"


@pytest.fixture
def fresh_db(tmp_path: Path) -> Path:
    return tmp_path / "gormes.db"


def test_the_shipped_fixtures_pass_with_no_privacy_violation(fresh_db):
    done = run_gormes(fresh_db, "eval", "recall", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["queries"] >= 50 and report["k"] == 5 and report["privacy_violations"] == []
    assert [m["mode"] for m in report["modes"]] == ["lexical", "graph", "semantic", "fused"]
    fused = next(m for m in report["modes"] if m["mode"] == "fused")
    assert fused["enabled"] and fused["scored"]["queries"] >= 40
    assert {"precision", "recall", "mrr", "ndcg"} <= set(fused["scored"])
    assert not fresh_db.exists()  # the eval seeds a scratch database, never the user's


def test_people_get_a_table_per_mode(fresh_db):
    done = run_gormes(fresh_db, "eval", "recall", "--modes", "lexical,fused", "--k", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "P@3" in lines[1] and "MRR" in lines[1] and "nDCG@3" in lines[1]
    assert [line.split()[0] for line in lines[3:5]] == ["lexical", "fused"]
    assert "privacy violations: 0" in done.stdout


def test_a_privacy_violation_exits_1(fresh_db, tmp_path):
    fixture = (SHIPPED / "privacy.yaml").read_text()
    # an operator may recall across scopes, so expecting a refusal must be reported
    broken = fixture.replace("cross_scope: true, trust: gateway, expect_denied: true",
                             "cross_scope: true, trust: operator, expect_denied: true")
    assert broken != fixture
    (tmp_path / "privacy.yaml").write_text(broken)
    done = run_gormes(fresh_db, "eval", "recall", "--fixtures", str(tmp_path), "--modes", "lexical", "--json")
    assert done.returncode == 1
    (violation,) = json.loads(done.stdout)["privacy_violations"]
    assert violation["query"] == "gateway-denied"
    table = run_gormes(fresh_db, "eval", "recall", "--fixtures", str(tmp_path), "--modes", "lexical")
    assert table.returncode == 1 and "privacy violations: 1" in table.stdout


def test_a_malformed_fixture_is_one_line_and_nothing_is_lost(fresh_db, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nqueries:\n  - {id: q, query: x, scope: nowhere}\n")
    before = broken.read_bytes()
    line = assert_one_line_error(run_gormes(fresh_db, "eval", "recall", "--fixtures", str(tmp_path)))
    assert f"{broken}: query 'q': scope 'nowhere' is not chat:<id> or project:<id>" in line
    assert broken.read_bytes() == before


@pytest.mark.parametrize(("args", "message"), [
    (("--fixtures", "/nonexistent/recall"), "recall fixtures not found"),
    (("--modes", "lexical,psychic"), "unknown recall mode psychic"),
])
def test_bad_options_are_one_clear_line(fresh_db, args, message):
    assert message in assert_one_line_error(run_gormes(fresh_db, "eval", "recall", *args))
