"""Paths deeper than any walk of gormes reads.

`gormes/contained.py` walks a path one component at a time and keeps a
descriptor of every directory on the way (for `..`). Nothing bounded how many:
a child agent's `knowledge.write` of `d/d/d/.../page.md` (a few KB of JSON)
made one directory per component below the knowledge root, holding one
descriptor each while it did. Under a soft limit of 1024 descriptors (systemd's
default) the walk ran the worker out of descriptors midway (every other task of
the process failing to open a file or a socket meanwhile), and left a thousand
nested directories behind; under a higher limit it dug the whole tree, below
the depth (`MAX_DEPTH`, 64) that `fs.list`, `fs.grep` and the knowledge index
ever walk, so no tool of gormes could even see what it made.

A path deeper than `MAX_DEPTH` directories below its root is now refused as bad
input before the directory past that depth is made or opened.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ops_helpers import audit_events

from gormes.contained import MAX_DEPTH
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, InvalidOperationInput
from gormes.tools.builtin import default_registry

CHILD = Caller(trust="child-agent", id="run-1", run_id="run-1")
GATEWAY = Caller(trust="gateway", id="mcp:attacker")
TOO_DEEP = 200  # past MAX_DEPTH; shallow enough for shutil.rmtree (recursive) to clean up


pytestmark = pytest.mark.usefixtures("isolated_knowledge")


def deepest(root: Path) -> int:
    """How many directories deep the tree below `root` goes (walked by
    descriptor: its paths are longer than PATH_MAX)."""
    def below(fd: int) -> int:
        most = 0
        with os.scandir(fd) as found:
            names = [e.name for e in found if e.is_dir(follow_symlinks=False)]
        for name in names:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                most = max(most, 1 + below(child))
            finally:
                os.close(child)
        return most

    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return below(top)
    finally:
        os.close(top)


def dig(root: Path, depth: int) -> None:
    """`d/d/.../d/page.txt`, `depth` directories deep, made by descriptor."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        page = os.open("page.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(page, b"deep\n")
        os.close(page)
    finally:
        os.close(fd)


async def test_a_child_agents_write_cannot_dig_below_what_gormes_walks(store, tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    executor = Executor(default_registry(), store, workspace=ws)
    path = "d/" * TOO_DEEP + "page.md"

    with pytest.raises(InvalidOperationInput, match="deeper than"):
        await executor.call("knowledge.write", {"path": path, "text": "x"}, CHILD)

    root = ws / ".writ"
    assert not root.exists() or deepest(root) <= MAX_DEPTH
    # written ahead (decision 0062): refused by the handler, once it started
    [started, record] = [a for a in await audit_events(store) if a.operation == "knowledge.write"]
    assert (started.outcome, record.trust, record.outcome) == ("started", "child-agent", "invalid")


async def test_a_write_as_deep_as_the_walks_go_is_still_written(store, tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    executor = Executor(default_registry(), store, workspace=ws)
    path = "d/" * MAX_DEPTH + "page.md"
    await executor.call("knowledge.write", {"path": path, "text": "x"}, CHILD)
    assert deepest(ws / ".writ") == MAX_DEPTH


@pytest.mark.parametrize("operation, args", [
    ("fs.read", {"path": "d/" * TOO_DEEP + "page.txt"}),
    ("fs.list", {"path": "d/" * TOO_DEEP}),
    ("fs.grep", {"pattern": "deep", "path": "d/" * TOO_DEEP}),
])
async def test_a_gateway_reading_an_existing_deep_tree_is_refused_not_walked(store, tmp_path: Path, operation, args):
    """The tree exists (someone dug it); walking it would hold a descriptor per level."""
    ws = tmp_path / "ws"
    ws.mkdir()
    dig(ws, TOO_DEEP)
    executor = Executor(default_registry(), store, workspace=ws)
    with pytest.raises(InvalidOperationInput, match="deeper than"):
        await executor.call(operation, args, GATEWAY)
    shallow = "d/" * MAX_DEPTH
    listed = await executor.call("fs.list", {"path": shallow}, GATEWAY)
    assert [e.path for e in listed.entries] == [shallow + "d"]
