"""Detecting a brain by its health, and reading what `gbrain search` prints."""

from __future__ import annotations

import pytest
from knowledge_fakes import install

from gormes.knowledge.brain import (
    BrainConfig,
    CommandResult,
    detect,
    health_from,
    parse_search_output,
    trace_to_file,
)


@pytest.mark.parametrize(("state", "present", "status"), [
    ("healthy", True, "ok"),
    ("warnings", True, "warnings"),
    ("error", False, "failed"),  # exit 1: a failing command is absence, whatever it printed
    ("failing", False, "failed"),
    ("garbage", False, "unreadable"),
    ("missing", False, "missing"),
])
async def test_a_brain_is_present_only_when_its_doctor_says_ok_or_warnings(tmp_path, monkeypatch, state, present, status):
    install(tmp_path, monkeypatch, state)
    health = await detect(BrainConfig())
    assert (health.present, health.status) == (present, status)


async def test_a_slow_brain_is_absent_for_that_call(tmp_path, monkeypatch):
    fake = install(tmp_path, monkeypatch, "slow")
    health = await detect(BrainConfig(doctor_timeout=0.3))
    assert (health.present, health.status) == (False, "timeout")
    assert fake.calls() == ["doctor --json"]


def test_doctor_status_error_with_exit_0_is_still_absent():
    said = CommandResult(outcome="ok", stdout=b'{"status": "error", "checks": [{"name": "db", "status": "fail"}]}')
    health = health_from(said)
    assert (health.present, health.status, health.detail) == (False, "error", "db")


def test_warnings_name_the_checks_that_warn():
    said = CommandResult(outcome="ok", stdout=b'{"status": "WARNINGS", "checks": [{"name": "embed", "status": "warn"}, {"name": "db", "status": "ok"}]}')
    assert (health_from(said).present, health_from(said).detail) == (True, "embed")


@pytest.mark.parametrize("stdout", [b"[1, 2]", b'{"checks": []}', b'{"status": 3}'])
def test_doctor_output_without_a_status_is_unreadable(stdout):
    assert health_from(CommandResult(outcome="ok", stdout=stdout)).status == "unreadable"


def test_json_results_are_traced_to_markdown_files(root):
    out = b'{"results": [{"slug": "decisions/database", "score": 0.9, "chunk_text": "SQLite in WAL"},' \
          b' {"path": "decisions/scheduler.md", "title": "Scheduler", "snippet": "cronsim"},' \
          b' {"slug": "people/nobody", "score": "n/a"}, {"score": 1}]}'
    hits = parse_search_output(out, root)
    assert [(h.path, h.trusted, h.source) for h in hits] == [
        ("decisions/database.md", True, "gbrain"),
        ("decisions/scheduler.md", True, "gbrain"),
        ("people/nobody", False, "gbrain"),
    ]
    assert hits[0].snippet == "SQLite in WAL" and hits[0].score == 0.9 and hits[2].score == 0.0


def test_text_results_in_gbrain_format_are_read(root):
    out = b"[0.5332] decisions/database -- # Database\nnoise line\n[0.2] elsewhere/page -- other\n"
    hits = parse_search_output(out, root)
    assert [(h.path, h.trusted, h.score) for h in hits] == [
        ("decisions/database.md", True, 0.5332), ("elsewhere/page", False, 0.2)]


def test_a_path_outside_the_root_is_never_trusted(root, tmp_path):
    outside = tmp_path / "secret.md"
    outside.write_text("# not knowledge\n")
    assert trace_to_file(str(outside), root) is None
    assert trace_to_file("../secret.md", root) is None
    assert trace_to_file(str(root / "notes.md"), root) == "notes.md"
    assert trace_to_file("decisions", root) is None  # a directory is not a page


def test_the_executable_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GORMES_GBRAIN", "/opt/gbrain/bin/gbrain")
    assert BrainConfig().executable == "/opt/gbrain/bin/gbrain"
    assert BrainConfig(command="mybrain").executable == "mybrain"
