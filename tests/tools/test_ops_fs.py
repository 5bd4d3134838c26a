"""fs.read, fs.list, fs.grep: read-only, inside the workspace root, symlinks included."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ops_helpers import audit_events
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.tools.fs import FsEntry, FsGrepInput, GrepMatch, GrepAbandoned, grep_workspace, resolve_inside
from gormes.ops.spec import (
    Caller, InvalidOperationInput, OperationUnavailable, PathOutsideWorkspace,
)

CHILD = Caller(trust="child-agent", id="run-1", run_id="run-1")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("the password is hunter2\n")
    return secret


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "README.md").write_text("# Title\nhello world\n")
    (root / "docs" / "guide.md").write_text("alpha\nHello again\nomega\n")
    (root / "docs" / "deep" / "notes.txt").write_text("hello from deep\n")
    (root / "blob.bin").write_bytes(b"hello\0binary")
    (root / "link_out").symlink_to(outside / "secret.txt")
    (root / "dir_out").symlink_to(outside)
    (root / "link_in").symlink_to(root / "docs" / "guide.md")
    return root


@pytest.fixture
def executor(store, workspace: Path) -> Executor:
    return Executor(default_registry(), store, workspace=workspace)


async def test_fs_read_reads_a_file_inside_the_workspace(executor):
    out = await executor.call("fs.read", '{"path": "README.md"}', CHILD)
    assert (out.path, out.content, out.size, out.truncated) == ("README.md", "# Title\nhello world\n", 20, False)


async def test_fs_read_caps_what_it_reads_and_says_so(executor):
    out = await executor.call("fs.read", {"path": "README.md", "max_bytes": 7}, CHILD)
    assert (out.content, out.bytes_read, out.size, out.truncated) == ("# Title", 7, 20, True)
    rest = await executor.call("fs.read", {"path": "README.md", "offset": 8}, CHILD)
    assert (rest.content, rest.truncated) == ("hello world\n", False)


async def test_fs_read_follows_a_symlink_that_stays_inside(executor):
    out = await executor.call("fs.read", {"path": "link_in"}, CHILD)
    assert (out.path, out.content) == ("docs/guide.md", "alpha\nHello again\nomega\n")


@pytest.mark.parametrize("path", [
    "../outside/secret.txt",
    "docs/../../outside/secret.txt",
    "link_out",
    "dir_out/secret.txt",
    "../outside/does-not-exist",
    "/etc/passwd",
])
async def test_paths_escaping_the_root_are_refused_and_audited(executor, store, outside, path):
    with pytest.raises(PathOutsideWorkspace, match="is outside the workspace"):
        await executor.call("fs.read", {"path": path}, CHILD)
    (event,) = await audit_events(store)
    assert (event.operation, event.outcome) == ("fs.read", "denied")


async def test_an_absolute_path_is_refused_even_when_it_names_the_secret(executor, outside):
    with pytest.raises(PathOutsideWorkspace):
        await executor.call("fs.read", {"path": str(outside / "secret.txt")}, CHILD)
    with pytest.raises(PathOutsideWorkspace):
        await executor.call("fs.list", {"path": str(outside)}, CHILD)
    with pytest.raises(PathOutsideWorkspace):
        await executor.call("fs.grep", {"pattern": "password", "path": "dir_out"}, CHILD)


async def test_an_absolute_path_inside_the_root_is_allowed(executor, workspace):
    out = await executor.call("fs.read", {"path": str(workspace / "README.md")}, CHILD)
    assert out.path == "README.md"


async def test_missing_files_and_directories_are_invalid_input(executor):
    with pytest.raises(InvalidOperationInput, match="no such file"):
        await executor.call("fs.read", {"path": "nope.md"}, CHILD)
    with pytest.raises(InvalidOperationInput, match="not a file"):
        await executor.call("fs.read", {"path": "docs"}, CHILD)
    with pytest.raises(InvalidOperationInput, match="not a directory"):
        await executor.call("fs.list", {"path": "README.md"}, CHILD)


async def test_without_a_workspace_the_fs_operations_are_refused(store):
    executor = Executor(default_registry(), store, workspace=None)
    for name, args in [("fs.read", {"path": "x"}), ("fs.list", {}), ("fs.grep", {"pattern": "x"})]:
        with pytest.raises(OperationUnavailable, match="no workspace is configured"):
            await executor.call(name, args, CHILD)
    assert [e.outcome for e in await audit_events(store)] == ["denied"] * 3


async def test_fs_list_lists_symlinks_without_following_them(executor):
    out = await executor.call("fs.list", {}, CHILD)
    assert out.entries == [
        FsEntry(path="README.md", kind="file", size=20),
        FsEntry(path="blob.bin", kind="file", size=12),
        FsEntry(path="dir_out", kind="symlink"),
        FsEntry(path="docs", kind="dir"),
        FsEntry(path="link_in", kind="symlink"),
        FsEntry(path="link_out", kind="symlink"),
    ]
    assert out.truncated is False


async def test_fs_list_recurses_and_caps_entries(executor):
    out = await executor.call("fs.list", {"path": "docs", "recursive": True}, CHILD)
    assert [e.path for e in out.entries] == ["docs/deep", "docs/guide.md", "docs/deep/notes.txt"]
    capped = await executor.call("fs.list", {"recursive": True, "max_entries": 2}, CHILD)
    assert (len(capped.entries), capped.truncated) == (2, True)


async def test_fs_grep_finds_matches_but_never_outside_the_root(executor):
    out = await executor.call("fs.grep", {"pattern": "hello|password", "ignore_case": True}, CHILD)
    assert out.matches == [
        GrepMatch(path="README.md", line=2, text="hello world"),  # blob.bin is binary: skipped
        GrepMatch(path="link_in", line=2, text="Hello again"),  # link_out and dir_out: skipped
        GrepMatch(path="docs/guide.md", line=2, text="Hello again"),
        GrepMatch(path="docs/deep/notes.txt", line=1, text="hello from deep"),
    ]
    assert "hunter2" not in repr(out)
    assert out.truncated is False


async def test_fs_grep_filters_by_glob_and_caps_matches(executor):
    out = await executor.call("fs.grep", {"pattern": "hello", "glob": "*.txt"}, CHILD)
    assert [m.path for m in out.matches] == ["docs/deep/notes.txt"]
    capped = await executor.call("fs.grep", {"pattern": ".", "max_matches": 3}, CHILD)
    assert (len(capped.matches), capped.truncated) == (3, True)


async def test_fs_grep_refuses_a_bad_pattern(executor):
    with pytest.raises(InvalidOperationInput, match="invalid pattern"):
        await executor.call("fs.grep", {"pattern": "("}, CHILD)


async def test_the_fs_tools_do_not_write(executor, workspace):
    before = sorted((p, p.stat().st_mtime_ns) for p in workspace.rglob("*") if not p.is_symlink())
    await executor.call("fs.read", {"path": "README.md"}, CHILD)
    await executor.call("fs.list", {"recursive": True}, CHILD)
    await executor.call("fs.grep", {"pattern": "x"}, CHILD)
    after = sorted((p, p.stat().st_mtime_ns) for p in workspace.rglob("*") if not p.is_symlink())
    assert before == after
    assert os.path.islink(workspace / "link_out")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("sandbox")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    root = base / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("a")
    (root / "link_out").symlink_to(outside)
    (root / "docs" / "up").symlink_to("..")
    (root / "docs" / "up_up").symlink_to("../..")
    return root.resolve(), outside.resolve()


SEGMENTS = ["..", ".", "docs", "a.md", "link_out", "up", "up_up", "secret.txt", "outside", "ws", ""]


@given(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=7), st.booleans())
def test_no_path_of_any_shape_resolves_outside_the_root(sandbox, segments, absolute):
    root, _ = sandbox
    path = "/".join(segments)
    if absolute:
        path = str(root.parent) + "/" + path
    try:
        resolved = resolve_inside(root, path)
    except (PathOutsideWorkspace, InvalidOperationInput):
        return
    assert resolved.is_relative_to(root)


def test_a_grep_whose_call_was_given_up_stops_at_its_next_check(workspace):
    # The executor abandons the worker thread at the deadline; the handler then sets
    # `given_up`, and the worker must stop instead of searching on unseen.
    given_up = threading.Event()
    given_up.set()
    with pytest.raises(GrepAbandoned):
        grep_workspace(workspace.resolve(), FsGrepInput(pattern="hello"), given_up)
    assert grep_workspace(workspace.resolve(), FsGrepInput(pattern="hello"), threading.Event()).matches
