"""Selections are events tied to their run; the skill_usage projection links each
to the run's outcome and to feedback; the skill operations serve agents."""

from __future__ import annotations

import shutil

import msgspec
import pytest
from skill_helpers import FIXTURES

from gormes.events.runs import RunCompleted, RunFailed, RunStarted, run_stream
from gormes.events.skills import SkillSelected, skill_stream
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.tools.skills import skill_operations
from gormes.ops.spec import Caller, OperationUnavailable
from gormes.projections.runner import ProjectionRunner
from gormes.projections.skill_usage import skill_usage
from gormes.skillbook.errors import UnknownSkill
from gormes.skillbook.loader import load_skills
from gormes.skillbook.resolver import route
from gormes.skillbook.usage import (
    UnknownRun,
    read_usage,
    record_feedback,
    record_selections,
)


async def start_run(store, run_id: str) -> None:
    await store.append(run_stream(run_id), [RunStarted(run_id=run_id, handler="agent", handler_version="v1")])


def routed(phrase: str):
    return route(load_skills(FIXTURES / "good").skills, phrase)


async def test_selections_get_their_runs_outcome_and_feedback(store):
    await start_run(store, "r1")
    await start_run(store, "r2")
    (p1,) = await record_selections(store, "r1", routed("gamma thing").chosen, "gamma thing")
    (p2,) = await record_selections(store, "r2", routed("beta thing").chosen, "beta thing")
    rows = await read_usage(store)
    assert [(r.position, r.skill, r.run_id, r.outcome) for r in rows] == [
        (p1, "gamma", "r1", "running"), (p2, "beta", "r2", "running"),
    ]
    await store.append(run_stream("r1"), [RunCompleted(result="done")])
    await store.append(run_stream("r2"), [RunFailed(error="boom")])
    await record_feedback(store, "r1", "gamma", "good", "it found the answer")
    rows = await read_usage(store)
    assert [(r.skill, r.outcome, r.feedback, r.feedback_note) for r in rows] == [
        ("gamma", "completed", "good", "it found the answer"), ("beta", "failed", None, None),
    ]
    assert rows[0].score == 2.1 and rows[0].phrase == "gamma thing" and rows[0].status == "promoted"
    assert [r.skill for r in await read_usage(store, "beta")] == ["beta"]


async def test_a_selection_after_its_run_ended_still_gets_the_outcome(store):
    await start_run(store, "r3")
    await store.append(run_stream("r3"), [RunCompleted()])
    await record_selections(store, "r3", routed("gamma thing").chosen, None)
    (row,) = await read_usage(store)
    assert row.outcome == "completed"


async def test_the_projection_rebuilds_to_the_same_rows(store):
    await start_run(store, "r4")
    await record_selections(store, "r4", routed("beta thing").chosen, "beta thing")
    await store.append(run_stream("r4"), [RunFailed(error="x")])
    await record_feedback(store, "r4", "beta", "bad")
    before = await read_usage(store)
    await ProjectionRunner(store, skill_usage).rebuild()
    assert await read_usage(store) == before


async def test_feedback_needs_a_real_run(store):
    with pytest.raises(UnknownRun, match="no run 'ghost'"):
        await record_feedback(store, "ghost", "beta", "good")


# -- the operations ----------------------------------------------------------------


def executor_for(store, tmp_path, root=FIXTURES / "good") -> Executor:
    from gormes.ops.registry import Registry

    return Executor(Registry(skill_operations(root)), store, workspace=tmp_path)


async def test_skills_list_never_shows_disabled_and_candidates_only_on_request(store, tmp_path):
    ex = executor_for(store, tmp_path)
    agent = Caller(trust="child-agent", id="run-x", run_id="x")
    plain = await ex.call("skills.list", {}, agent)
    assert [s.name for s in plain.skills] == ["beta", "consumer", "gamma"]
    asked = await ex.call("skills.list", {"include_candidates": True}, agent)
    assert [s.name for s in asked.skills] == ["alpha", "beta", "consumer", "gamma"]
    operator = await ex.call("skills.list", {}, Caller(trust="operator", id="cli"))
    assert [s.name for s in operator.skills] == ["beta", "consumer", "delta", "gamma"]
    routed_ = await ex.call("skills.list", {"phrase": "the gamma thing"}, agent)
    assert routed_.route.choice == "gamma"


async def test_skills_read_records_a_selection_tied_to_the_run(store, tmp_path):
    await start_run(store, "x")
    ex = executor_for(store, tmp_path)
    out = await ex.call("skills.read", {"name": "gamma", "phrase": "gamma thing"}, Caller(trust="child-agent", id="run-x", run_id="x"))
    assert out.body.startswith("# gamma") and out.status == "promoted"
    (recorded,) = await store.read_stream(skill_stream("gamma"))
    assert recorded.position == out.selection_position
    assert recorded.event == SkillSelected(
        run_id="x", skill="gamma", score=2.1, why="trigger 'gamma thing' matched (2 words), and 1 more: 'gamma'",
        status="promoted", phrase="gamma thing",
    )
    plain = await ex.call("skills.read", {"name": "beta"}, Caller(trust="gateway", id="gw"))
    assert plain.selection_position is None  # no run, no selection


@pytest.mark.parametrize(("name", "candidates"), [("retired", True), ("alpha", False), ("delta", True), ("ghost", True)])
async def test_skills_read_refuses_what_the_caller_may_not_see(store, tmp_path, name, candidates):
    ex = executor_for(store, tmp_path)
    with pytest.raises(UnknownSkill, match=f"no skill named '{name}' is available"):
        await ex.call("skills.read", {"name": name, "include_candidates": candidates}, Caller(trust="child-agent", id="c"))


async def test_the_default_registry_offers_both_as_prompt_visible_tools(store, tmp_path):
    registry = default_registry()
    for trust in ("child-agent", "gateway", "system", "operator"):
        names = {t.name for t in registry.tool_schemas(trust)}
        assert {"skills.list", "skills.read"} <= names
    ex = Executor(registry, store, workspace=tmp_path)  # no skills/ in this workspace
    with pytest.raises(OperationUnavailable, match="no skills here"):
        await ex.call("skills.list", {}, Caller(trust="child-agent", id="c"))
    shutil.copytree(FIXTURES / "good", tmp_path / "skills")  # the workspace's skills/
    listed = await Executor(registry, store, workspace=tmp_path).call_json("skills.list", {}, Caller(trust="child-agent", id="c"))
    assert [s["name"] for s in msgspec.json.decode(listed)["skills"]] == ["beta", "consumer", "gamma"]
