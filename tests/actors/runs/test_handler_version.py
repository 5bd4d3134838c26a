"""`handler_version` covers the handler's whole module: a change to a helper beside
it is flagged on replay (a warning note, not a divergence, when the run still
replays exactly)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

from gormes.actors.runs.context import RunHandlerRegistry, handler_version
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay

SOURCE = '''
def greeting(name):
    return {greeting!r} + name


async def greet(ctx, input):
    await ctx.log(greeting(input))
    return "done"
'''

_names = itertools.count()


def load(tmp_path: Path, greeting: str, file: str | None = None):
    """`greet` from a module file of its own whose helper says `greeting`."""
    path = tmp_path / (file or f"greeter_{next(_names)}.py")
    path.write_text(SOURCE.format(greeting=greeting))
    name = f"gormes_test_{path.stem}_{next(_names)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.greet


def test_a_changed_helper_changes_the_version_and_the_same_source_keeps_it(tmp_path: Path) -> None:
    hello = load(tmp_path, "hello ")
    assert handler_version(hello) == handler_version(load(tmp_path, "hello "))  # another file, same source
    assert handler_version(hello) != handler_version(load(tmp_path, "hi "))  # only the helper differs
    assert len(handler_version(hello)) == 64


def test_the_version_is_of_the_code_that_runs_not_of_the_file_edited_since(tmp_path: Path) -> None:
    hello = load(tmp_path, "hello ", file="edited.py")
    before = handler_version(hello)
    (tmp_path / "edited.py").write_text(SOURCE.format(greeting="edited "))
    assert handler_version(hello) == before


async def test_replay_with_a_changed_helper_warns_and_names_the_divergence(store, db_path, tmp_path) -> None:
    recorded = RunHandlerRegistry({"greet": load(tmp_path, "hello ")})
    async with RunManager.open(store, handlers=recorded) as runs:
        outcome = await runs.run("greet", "ada")
    assert outcome.status == "completed"

    same = RunHandlerRegistry({"greet": load(tmp_path, "hello ")})
    changed = RunHandlerRegistry({"greet": load(tmp_path, "hi ")})
    with DatabaseRuns(db_path) as source:
        exact = await replay(source, outcome.run_id, registry=None, handlers=same)
        diverged = await replay(source, outcome.run_id, registry=None, handlers=changed)
    assert exact.tree_exact and not exact.handler_version_changed and exact.notes == []
    assert diverged.handler_version_changed
    assert any("changed since run" in note for note in diverged.notes)
    assert diverged.divergence.recorded == "log info hello ada"
    assert diverged.divergence.asked == "log info hi ada"
