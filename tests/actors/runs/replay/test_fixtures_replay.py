"""Every recorded fixture replays exactly, children included, and shows what it claims."""

from __future__ import annotations

from collections import Counter

import pytest
from replay_helpers import MANIFEST, fixture_lines, fixture_path

from gormes.actors.runs.recorded import FileRuns
from gormes.actors.runs.replay import replay
from gormes.tools.builtin import default_registry

# fixtures of what came later (a turn the handler's own scope cut, decision 0080): the second scheme
RECORDED_AFTER_0064 = {"timeboxed_turn"}
CASES = [(name, r) for name, entry in MANIFEST.items() for r in entry["replays"]]


def test_the_manifest_holds_the_six_required_recordings() -> None:
    assert {"subagents", "tool_error", "inbox_steering", "paused_resumed", "cancelled_child",
            "provider_retry"} <= set(MANIFEST)


@pytest.mark.parametrize(("name", "expected"), CASES, ids=[f"{n}:{r['run_id']}" for n, r in CASES])
async def test_a_fixture_replays_exactly(name: str, expected: dict) -> None:
    report = await replay(FileRuns(fixture_path(name)), expected["run_id"], registry=default_registry())
    assert report.first_divergence is None
    assert report.tree_exact
    assert report.total_events == expected["events"]
    assert report.status == expected["status"]
    assert len(list(report.walk())) == expected["runs"]
    assert not any(r.handler_version_changed for r in report.walk())


def events_of(name: str) -> list[dict]:
    return fixture_lines(name)


def test_the_fixtures_hold_first_scheme_request_hashes_so_old_logs_are_replayed_above() -> None:
    # Logs recorded before decision 0064 hold the first scheme's hashes; these fixtures
    # are such logs. Re-recorded, they would test only the second: keep one old one.
    hashes = [line["data"]["request_hash"] for name in MANIFEST if name not in RECORDED_AFTER_0064
              for line in events_of(name) if line["type"] in ("run.llm_turn", "run.llm_failed")]
    assert hashes and not any(h.startswith("v2:") for h in hashes)


def test_subagents_go_two_levels_deep() -> None:
    depths = [line["data"]["depth"] for line in events_of("subagents") if line["type"] == "run.started"]
    assert sorted(depths) == [0, 1, 2]


def test_tool_error_records_a_failed_tool_call_then_a_completed_run() -> None:
    lines = events_of("tool_error")
    outcomes = [line["data"]["outcome"] for line in lines if line["type"] == "run.tool_called"]
    assert outcomes == ["error", "ok"]
    assert lines[-1]["type"] == "run.completed"


def test_inbox_steering_reads_a_message_before_a_later_model_turn() -> None:
    kinds = [(line["type"], len(line["data"].get("messages", ()))) for line in events_of("inbox_steering")]
    read_at = kinds.index(("run.inbox_read", 1))
    assert ("run.llm_turn", 0) in kinds[:read_at]  # mid-run: after a model turn...
    assert kinds[read_at + 1][0] == "run.llm_turn"  # ...and just before the next one


def test_provider_retry_records_failures_then_the_same_request_answered() -> None:
    lines = events_of("provider_retry")
    failed = [line["data"] for line in lines if line["type"] == "run.llm_failed"]
    turns = {line["data"]["request_hash"] for line in lines if line["type"] == "run.llm_turn"}
    assert len(failed) == 2 and all(f["retryable"] for f in failed)
    assert {f["request_hash"] for f in failed} <= turns


def test_cancelled_child_is_cancelled_and_its_parent_saw_it() -> None:
    lines = events_of("cancelled_child")
    child = next(line["data"] for line in lines if line["type"] == "run.child_finished")
    assert child["status"] == "cancelled"
    child_end = [line for line in lines if line["stream"] == f"run-{child['child_run_id']}"][-1]
    assert child_end["type"] == "run.cancelled"
    kinds = Counter(line["type"] for line in lines)
    for kind in ("run.logged", "run.clock_read", "run.random_drawn", "run.progress", "run.tokens_added",
                 "run.tool_called", "run.inbox_read", "run.child_spawned"):
        assert kinds[kind] >= 1, kind


def test_paused_resumed_is_one_job_paused_then_finished_by_a_second_run() -> None:
    started = [line["data"] for line in events_of("paused_resumed") if line["type"] == "run.started"]
    assert len(started) == 2 and started[0]["job_id"] == started[1]["job_id"] is not None
    ends = [line for line in events_of("paused_resumed") if line["type"] in ("run.cancelled", "run.completed")]
    assert [(e["type"], e["data"].get("reason")) for e in ends] == [
        ("run.cancelled", "job paused"), ("run.completed", None),
    ]


def test_paused_resumed_continues_the_cancelled_run_from_its_recorded_prefix() -> None:
    lines = events_of("paused_resumed")
    first, second = [line["data"] for line in lines if line["type"] == "run.started"]
    assert first.get("resumed_from") is None
    assert second["resumed_from"]["run_id"] == first["run_id"]
    cut = second["resumed_from"]["position"]

    def observations(run_id: str) -> list[dict]:
        return [line for line in lines if line["stream"] == f"run-{run_id}" and "seq" in line["data"]]

    prefix = [line for line in observations(first["run_id"]) if line["position"] <= cut]
    copied = observations(second["run_id"])[: len(prefix)]
    assert prefix and [(c["type"], c["data"]) for c in copied] == [(p["type"], p["data"]) for p in prefix]
    # what came after the prefix was live: the word read, then the agent's model turns
    later = [line["type"] for line in observations(second["run_id"])[len(prefix):]]
    assert "run.llm_turn" in later and "run.llm_turn" not in [p["type"] for p in prefix]
