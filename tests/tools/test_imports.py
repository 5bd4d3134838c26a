"""`load_imports`: one loader for operations, run handlers and job handlers; a
reload replaces what a module declared; a failed load changes nothing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gormes.actors.jobs.handlers import HandlerImportError, file_module_name
from gormes.actors.jobs.handlers import default_registry as job_handlers
from gormes.actors.runs.context import run_handlers
from gormes.ops.declared import declared
from gormes.ops.spec import InvalidOperationSpec
from gormes.tools.builtin import builtin_registry, default_registry
from gormes.tools.imports import load_imports

SOURCE = '''
import msgspec
import gormes


class In(msgspec.Struct):
    city: str


@gormes.operation({name!r}, description={description!r})
async def op(ctx: gormes.OperationContext, input: In) -> dict:
    return {{"city": input.city}}


@gormes.run_handler("imports-test-handler")
async def handler(ctx, input):
    return None


@gormes.job("imports-test-job")
async def job(ctx, data):
    return data
'''


@pytest.fixture(autouse=True)
def clean_declared() -> Iterator[None]:
    saved = declared.snapshot()
    modules = set(sys.modules)
    yield
    declared.restore(saved)
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def write(path: Path, name: str = "weather.get", description: str = "First.") -> Path:
    path.write_text(SOURCE.format(name=name, description=description))
    return path


def test_one_import_brings_operations_run_handlers_and_job_handlers(tmp_path: Path):
    load_imports([str(write(tmp_path / "tools_a.py"))])
    registry = default_registry()
    assert registry.get("weather.get").description == "First."
    assert len(registry.list()) == len(builtin_registry().list()) + 1
    assert "imports-test-handler" in run_handlers and "imports-test-job" in job_handlers


def test_a_file_imported_again_replaces_what_it_declared(tmp_path: Path):
    path = write(tmp_path / "tools_b.py")
    load_imports([str(path)])
    write(path, name="weather.now", description="Second.")
    load_imports([str(path)])
    assert "weather.get" not in declared  # no longer declared by the file
    assert default_registry().get("weather.now").description == "Second."


def test_a_module_reloaded_replaces_its_operations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write(tmp_path / "reloaded_tools_mod.py")
    load_imports(["reloaded_tools_mod"])
    write(path, description="Reloaded.")
    load_imports(["reloaded_tools_mod"])  # not a reload: an imported module is imported once
    assert default_registry().get("weather.get").description == "First."
    load_imports(["reloaded_tools_mod"], reload={"reloaded_tools_mod"})
    assert default_registry().get("weather.get").description == "Reloaded."


def test_the_same_name_from_another_file_is_refused_and_nothing_changes(tmp_path: Path):
    first = write(tmp_path / "tools_c.py")
    load_imports([str(first)])
    before = declared.snapshot()
    second = write(tmp_path / "tools_d.py", name="weather.other")
    third = write(tmp_path / "tools_e.py")
    with pytest.raises(HandlerImportError) as caught:
        load_imports([str(second), str(third)])
    assert "'weather.get' is declared twice" in str(caught.value)
    assert str(first) in str(caught.value) and str(third) in str(caught.value)
    assert declared.snapshot() == before  # weather.other from the failed load is gone too


def test_a_clash_with_a_built_in_is_refused_after_the_imports(tmp_path: Path):
    with pytest.raises(InvalidOperationSpec, match="'time__now' .* clashes with the built-in operation 'time.now'"):
        load_imports([str(write(tmp_path / "tools_f.py", name="time__now"))])
    assert "time__now" not in declared
    with pytest.raises(InvalidOperationSpec, match="clashes with the built-in operation 'time.now': they share the name"):
        load_imports([str(write(tmp_path / "tools_g.py", name="time.now"))])


def test_a_file_has_one_module_name_wherever_it_is_named_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = write(tmp_path / "tools_h.py")
    monkeypatch.chdir(tmp_path)
    assert file_module_name("tools_h.py") == file_module_name(path)
    load_imports(["tools_h.py", str(path)])
    assert "weather.get" in declared
