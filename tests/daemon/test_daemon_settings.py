"""Daemon settings (file + command line) and reloading handler modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gormes.actors.jobs.handlers import HandlerImportError
from gormes.daemon import DaemonSettings, HandlerLoader, InvalidSettings, load_settings


def test_the_command_line_wins_over_the_file(tmp_path: Path):
    path = tmp_path / "daemon.toml"
    path.write_text('queues = ["mail"]\nconcurrency = 3\nshutdown_grace_ms = 500\n')
    settings = load_settings(path, {"concurrency": 7})
    assert settings == DaemonSettings(queues=("mail",), concurrency=7, shutdown_grace_ms=500)


@pytest.mark.parametrize("text, fault", [
    ("concurrency = 0", "concurrency must be 1..10000"),
    ("colour = 'blue'", "bad daemon settings"),
    ("concurrency = ", "cannot read daemon settings"),
])
def test_bad_settings_are_one_clear_error(tmp_path: Path, text: str, fault: str):
    path = tmp_path / "daemon.toml"
    path.write_text(text)
    with pytest.raises(InvalidSettings, match=fault):
        load_settings(path, {})


def test_a_missing_settings_file_is_refused(tmp_path: Path):
    with pytest.raises(InvalidSettings, match="cannot read"):
        load_settings(tmp_path / "nope.toml", {})


async def test_reloading_a_module_by_name_runs_its_new_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    module = tmp_path / "reload_me_handlers.py"
    source = "from gormes.actors.jobs.handlers import job\n@job('reload-me')\nasync def h(ctx, data):\n    return {!r}\n"
    module.write_text(source.format("one"))
    monkeypatch.syspath_prepend(str(tmp_path))
    loader = HandlerLoader()
    try:
        first = loader.load(("reload_me_handlers",))
        assert "reload-me" in first and "echo" in first
        module.write_text(source.format("two"))
        second = loader.load(("reload_me_handlers",))
        assert await first.get("reload-me")(None, None) == "one"
        assert await second.get("reload-me")(None, None) == "two"
        module.write_text("raise RuntimeError('broken on purpose')\n")
        with pytest.raises(HandlerImportError, match="cannot reload handlers .* broken on purpose"):
            loader.load(("reload_me_handlers",))
    finally:
        sys.modules.pop("reload_me_handlers", None)
