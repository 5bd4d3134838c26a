"""The public face: every name `gormes` exports resolves, type checkers see the
same names, and `import gormes` alone stays light."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gormes

REPO = Path(__file__).resolve().parents[1]
INIT = REPO / "gormes" / "__init__.py"
# What `import gormes` must not load: the CLI imports the package before it knows
# which command runs, so these would slow every command (`gormes --help` included).
HEAVY = ("trio", "msgspec", "sqlite3", "gormes.actors", "gormes.events")


def test_all_is_the_version_and_the_exports():
    assert gormes.__all__ == ["__version__", *gormes._EXPORTS]
    assert len(set(gormes.__all__)) == len(gormes.__all__)


@pytest.mark.parametrize("name", sorted(gormes._EXPORTS))
def test_each_public_name_is_the_object_its_module_defines(name):
    owner = importlib.import_module(gormes._EXPORTS[name])
    assert getattr(gormes, name) is getattr(owner, name)


def test_dir_lists_every_public_name_before_any_is_used():
    listed = run_python("import gormes; print(' '.join(dir(gormes)))").split()
    assert set(gormes.__all__) <= set(listed)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'gormes' has no attribute 'Jobqueue'"):
        gormes.Jobqueue  # noqa: B018


def test_type_checkers_see_the_same_names():
    tree = ast.parse(INIT.read_text())
    (block,) = [node for node in tree.body if isinstance(node, ast.If)
                and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"]
    seen = {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == gormes._EXPORTS


def test_import_gormes_alone_loads_nothing_heavy():
    loaded = run_python("import sys, gormes; print(' '.join(sorted(sys.modules)))").split()
    assert "gormes" in loaded
    assert "gormes.actors.jobs.queue" not in loaded
    assert [m for m in loaded if m.startswith(HEAVY)] == []


def test_a_public_name_loads_its_module_on_first_use():
    loaded = run_python("import sys, gormes; gormes.JobQueue; print(' '.join(sorted(sys.modules)))").split()
    assert "gormes.actors.jobs.queue" in loaded


def run_python(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_script_reading_through_open_store_gets_the_built_in_types(tmp_path):
    """Only `import gormes`, as a user's script does: every built-in event read back
    through `open_store` is its own type, none an `UnknownEvent`."""
    db = tmp_path / "g.db"
    written = run_python(
        "import trio, gormes\n"
        "from gormes.actors.jobs.queue import JobQueue\n"
        "async def main():\n"
        f"    async with gormes.open_store({str(db)!r}) as store:\n"
        "        await (await JobQueue.open(store)).submit('resize', {'path': 'cat.png'})\n"
        "trio.run(main)\n"
    )
    assert written == ""
    types = run_python(
        "import trio, gormes\n"
        "async def main():\n"
        f"    async with gormes.open_store({str(db)!r}) as store:\n"
        "        for r in await store.read_all():\n"
        "            print(r.type, type(r.event).__name__)\n"
        "trio.run(main)\n"
    ).splitlines()
    assert any(line.startswith("job.submitted ") for line in types), types
    assert [line for line in types if line.endswith(" UnknownEvent")] == []
