"""The daemon's approval settings (decision 0033): checked when read, and handed to
every run the daemon's workers drive through the environment the approval gate reads."""

from __future__ import annotations

import pytest

from gormes.actors.runs.approvals import ON_TIMEOUT_ENV, REQUIRE_ENV, TIMEOUT_ENV, ApprovalPolicy
from gormes.daemon import InvalidSettings, apply_model_timeout, load_settings


@pytest.fixture(autouse=True)
def approval_environment(monkeypatch) -> None:
    """apply_model_timeout writes os.environ itself: each test starts without the
    approval settings, and what it wrote is taken back after it (a timeout of 600 s
    left behind made a later test's parked request wait past its hang guard)."""
    for name in (REQUIRE_ENV, TIMEOUT_ENV, ON_TIMEOUT_ENV):
        monkeypatch.setenv(name, "")  # remembers what was there, to put it back
        monkeypatch.delenv(name)


def test_the_settings_reach_the_runs_approval_policy(tmp_path) -> None:
    config = tmp_path / "gormes.toml"
    config.write_text('require_approval = ["shell.run", "payments.*"]\napproval_timeout_s = 600\n'
                      'approval_on_timeout = "fail"\n')
    settings = load_settings(config, {})
    apply_model_timeout(settings)
    import os

    assert ApprovalPolicy.from_env(os.environ) == ApprovalPolicy(
        require=("shell.run", "payments.*"), timeout_s=600.0, on_timeout="fail")


@pytest.mark.parametrize("bad", [{"approval_on_timeout": "maybe"}, {"approval_timeout_s": 0},
                                 {"approval_timeout_s": -5}])
def test_bad_approval_settings_are_one_line(bad) -> None:
    with pytest.raises(InvalidSettings, match="approvals: "):
        load_settings(None, bad)


def test_the_files_rules_add_to_the_environments_and_a_reload_never_drops_them(monkeypatch, tmp_path) -> None:
    """An attacker's finding: the file's `require_approval` replaced the environment's
    list, so a daemon started with GORMES_REQUIRE_APPROVAL=memory.remember and a file
    naming fs.read ran memory.remember ungated; and a reload that removed the file's
    rules kept them. The file's rules add to the environment's as the daemon found it."""
    import os

    monkeypatch.setenv("GORMES_REQUIRE_APPROVAL", "memory.remember")
    config = tmp_path / "gormes.toml"
    config.write_text('require_approval = ["fs.read", "memory.remember"]\n')
    at_start = os.environ["GORMES_REQUIRE_APPROVAL"]
    apply_model_timeout(load_settings(config, {}), at_start)
    assert ApprovalPolicy.from_env(os.environ).require == ("memory.remember", "fs.read")
    config.write_text("")  # reloaded without the file's rules: the environment's stay
    apply_model_timeout(load_settings(config, {}), at_start)
    assert ApprovalPolicy.from_env(os.environ).require == ("memory.remember",)
    monkeypatch.delenv("GORMES_REQUIRE_APPROVAL")
    apply_model_timeout(load_settings(config, {}), None)
    assert "GORMES_REQUIRE_APPROVAL" not in os.environ
