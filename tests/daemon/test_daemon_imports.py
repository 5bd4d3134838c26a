"""The daemon's imports (`--import`, the config file's `imports`) bring operations
into the tool registry its agent jobs use; SIGHUP's reload replaces them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gormes.actors.jobs.handlers import HandlerImportError
from gormes.daemon import HandlerLoader, load_settings
from gormes.ops.declared import declared
from gormes.tools.builtin import default_registry

SOURCE = '''
import msgspec
import gormes


class In(msgspec.Struct):
    city: str


@gormes.operation("daemon_test.{op}")
async def op(ctx: gormes.OperationContext, input: In) -> dict:
    """An operation the daemon imports."""
    return {{}}
'''


@pytest.fixture(autouse=True)
def clean_declared() -> Iterator[None]:
    saved = declared.snapshot()
    modules = set(sys.modules)
    yield
    declared.restore(saved)
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def test_the_config_files_imports_bring_operations_and_a_reload_replaces_them(tmp_path: Path):
    tools = tmp_path / "daemon_tools.py"
    tools.write_text(SOURCE.format(op="first"))
    config = tmp_path / "gormes.toml"
    config.write_text(f"imports = [{str(tools)!r}]\n")
    settings = load_settings(config, {})
    loader = HandlerLoader()
    loader.load(settings.imports)
    assert "daemon_test.first" in default_registry()

    tools.write_text(SOURCE.format(op="second"))
    loader.load(load_settings(config, {}).imports)  # SIGHUP: the same file again
    registry = default_registry()
    assert "daemon_test.second" in registry and "daemon_test.first" not in registry

    tools.write_text(SOURCE.format(op="third") + "\nraise RuntimeError('broken on purpose')\n")
    with pytest.raises(HandlerImportError, match="broken on purpose"):
        loader.load(settings.imports)
    assert "daemon_test.second" in default_registry()  # a failed reload keeps what ran
