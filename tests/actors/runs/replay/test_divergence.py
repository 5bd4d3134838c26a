"""Handlers changed on purpose: replay names the first divergence, at the right place."""

from __future__ import annotations

import changed_handlers as changed
from replay_helpers import MANIFEST, fixture_lines, fixture_path

from gormes.actors.runs.recorded import FileRuns
from gormes.actors.runs.replay import replay
from gormes.tools.builtin import default_registry


def root(name: str) -> str:
    return MANIFEST[name]["replays"][0]["run_id"]


def first(name: str, kind: str, stream: str | None = None, **data) -> dict:
    return next(
        line for line in fixture_lines(name)
        if line["type"] == kind and (stream is None or line["stream"] == stream)
        and all(line["data"].get(k) == v for k, v in data.items())
    )


async def replay_with(name: str, handler: str, fn, **options):
    return await replay(FileRuns(fixture_path(name)), root(name), registry=default_registry(),
                        handlers=changed.registry_with(handler, fn), **options)


async def test_another_prompt_diverges_at_the_first_model_turn() -> None:
    report = await replay_with("tool_error", "agent", changed.agent_with_another_prompt)
    turn = first("tool_error", "run.llm_turn")
    d = report.divergence
    assert not report.exact and report.status == "diverged"
    assert (d.position, d.seq) == (turn["position"], turn["data"]["seq"])
    assert d.recorded == f"llm model=scripted request {turn['data']['request_hash'][:12]} (1 messages)"
    assert d.asked.startswith("llm model=scripted request ") and d.asked.endswith("(2 messages)")


async def test_other_tool_arguments_diverge_at_that_tool_call() -> None:
    report = await replay_with("cancelled_child", "fixture.cancel_child", changed.cancel_child_reading_another_file)
    call = first("cancelled_child", "run.tool_called")
    d = report.first_divergence
    assert (d.run_id, d.position, d.seq) == (root("cancelled_child"), call["position"], call["data"]["seq"])
    assert d.recorded == 'tool fs.read {"path":"README.md"}'
    assert d.asked == 'tool fs.read {"path":"notes.txt"}'


async def test_an_extra_tool_call_diverges_where_it_was_made() -> None:
    report = await replay_with("cancelled_child", "fixture.cancel_child", changed.cancel_child_with_an_extra_tool_call)
    call = first("cancelled_child", "run.tool_called")
    d = report.first_divergence
    assert (d.position, d.seq) == (call["position"], call["data"]["seq"])
    assert (d.recorded, d.asked) == ('tool fs.read {"path":"README.md"}', 'tool fs.list {"path":"."}')


async def test_a_call_after_the_recorded_end_is_a_divergence_at_the_end() -> None:
    report = await replay_with("cancelled_child", "fixture.cancel_child", changed.cancel_child_logging_at_the_end)
    end = first("cancelled_child", "run.completed")
    d = report.first_divergence
    observations = sum(1 for line in fixture_lines("cancelled_child")
                       if line["stream"] == end["stream"] and "seq" in line["data"])
    assert (d.position, d.seq) == (end["position"], observations + 1)
    assert d.recorded.startswith("the end of the run (completed")
    assert d.asked == "log info one more thing"


async def test_recorded_events_never_asked_for_are_a_divergence() -> None:
    report = await replay_with("cancelled_child", "fixture.cancel_child", changed.cancel_child_that_stops_early)
    progress = first("cancelled_child", "run.progress", progress={"step": 2, "of": 2})
    d = report.first_divergence
    assert (d.position, d.seq) == (progress["position"], progress["data"]["seq"])
    assert d.recorded == 'progress {"of":2,"step":2}'
    assert d.asked.startswith("nothing more (the handler returned")


async def test_another_result_diverges_at_the_run_end() -> None:
    report = await replay_with("cancelled_child", "fixture.cancel_child", changed.cancel_child_with_another_result)
    end = first("cancelled_child", "run.completed")
    d = report.first_divergence
    assert (d.position, d.seq) == (end["position"], None)
    assert '"readme_bytes":' in d.asked and d.asked.startswith("an end where the handler returned")


async def test_a_changed_child_diverges_in_the_child_and_the_parent_stays_exact() -> None:
    report = await replay_with("cancelled_child", "fixture.wait_then_agent", changed.child_logging_another_message)
    child_id = first("cancelled_child", "run.child_spawned")["data"]["child_run_id"]
    logged = first("cancelled_child", "run.logged", stream=f"run-{child_id}")
    parent, child = report, report.children[0]
    assert parent.exact and parent.status == "completed"
    assert not child.exact and child.run_id == child_id
    d = report.first_divergence
    assert (d.run_id, d.position, d.seq) == (child_id, logged["position"], 1)
    assert d.recorded == "log info waiting for 'never sent'"
    assert d.asked == "log info now waiting for 'never sent'"


async def test_without_children_a_changed_child_is_not_replayed() -> None:
    report = await replay_with("cancelled_child", "fixture.wait_then_agent", changed.child_logging_another_message,
                               children=False)
    assert report.tree_exact
    assert [c.status for c in report.children] == ["not replayed"]


async def test_a_new_handler_version_is_reported_and_is_not_a_failure_when_exact() -> None:
    report = await replay_with("subagents", "agent", changed.agent_reformatted)
    assert report.tree_exact
    assert all(r.handler_version_changed for r in report.walk())
    assert any("changed since run" in note for note in report.notes)
