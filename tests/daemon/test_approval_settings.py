"""The daemon's settings reach every run its workers drive through the environment
the providers, the rate limits and the approval gate read (decision 0033): checked
when read, laid over the environment the daemon started with at each reload, and
never dropping a limit or a gate the environment set."""

from __future__ import annotations

import pytest

import os

from gormes.actors.runs.approvals import ApprovalPolicy
from gormes.control.rate_rules import rules_from_env
from gormes.daemon import SETTINGS_ENV, InvalidSettings, apply_to_environment, environment_at_start, load_settings


@pytest.fixture(autouse=True)
def settings_environment(monkeypatch) -> None:
    """apply_to_environment writes os.environ itself: each test starts without the
    settings' variables, and what it wrote is taken back after it (a timeout of 600 s
    left behind made a later test's parked request wait past its hang guard)."""
    for name in SETTINGS_ENV:
        monkeypatch.setenv(name, "")  # remembers what was there, to put it back
        monkeypatch.delenv(name)


def test_the_settings_reach_the_runs_approval_policy(tmp_path) -> None:
    config = tmp_path / "gormes.toml"
    config.write_text('require_approval = ["shell.run", "payments.*"]\napproval_timeout_s = 600\n'
                      'approval_on_timeout = "fail"\n')
    settings = load_settings(config, {})
    apply_to_environment(settings)
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
    monkeypatch.setenv("GORMES_REQUIRE_APPROVAL", "memory.remember")
    config = tmp_path / "gormes.toml"
    config.write_text('require_approval = ["fs.read", "memory.remember"]\n')
    at_start = environment_at_start()
    apply_to_environment(load_settings(config, {}), at_start)
    assert ApprovalPolicy.from_env(os.environ).require == ("memory.remember", "fs.read")
    config.write_text("")  # reloaded without the file's rules: the environment's stay
    apply_to_environment(load_settings(config, {}), at_start)
    assert ApprovalPolicy.from_env(os.environ).require == ("memory.remember",)
    apply_to_environment(load_settings(config, {}), {})
    assert "GORMES_REQUIRE_APPROVAL" not in os.environ


def test_the_files_rate_rules_go_first_and_the_environments_stay(monkeypatch, tmp_path) -> None:
    """The file's `rate_limits` replaced GORMES_RATE_LIMITS: a daemon started with a
    limit on anthropic:* and a file limiting openai:gpt-4o ran anthropic unlimited."""
    monkeypatch.setenv("GORMES_RATE_LIMITS", "anthropic:*=50rpm openai:gpt-4o=900rpm")
    config = tmp_path / "gormes.toml"
    config.write_text('rate_limits = ["openai:gpt-4o=500rpm"]\n')
    at_start = environment_at_start()
    apply_to_environment(load_settings(config, {}), at_start)
    rules, _ = rules_from_env(os.environ)
    assert rules.for_key("anthropic:claude").text() == "anthropic:*=50rpm"
    assert rules.for_key("openai:gpt-4o").text() == "openai:gpt-4o=500rpm"  # the file's, named first
    config.write_text("")
    apply_to_environment(load_settings(config, {}), at_start)
    assert os.environ["GORMES_RATE_LIMITS"] == "anthropic:*=50rpm openai:gpt-4o=900rpm"


def test_a_reload_that_drops_a_setting_gives_back_the_environments_value(monkeypatch, tmp_path) -> None:
    """Each reload lays the file over the environment the daemon started with: a
    setting the file no longer names was the previous file's value until then."""
    monkeypatch.setenv("GORMES_MODEL_TIMEOUT", "30")
    config = tmp_path / "gormes.toml"
    config.write_text('model_timeout_s = 5\nmodel_retries = 1\noutage_after = 2\nrate_limits = ["openai:*=9rpm"]\n'
                      'approval_timeout_s = 60\napproval_on_timeout = "fail"\n')
    at_start = environment_at_start()
    apply_to_environment(load_settings(config, {}), at_start)
    assert (os.environ["GORMES_MODEL_TIMEOUT"], os.environ["GORMES_MODEL_RETRIES"]) == ("5.0", "1")
    assert rules_from_env(os.environ)[1] == 2
    config.write_text("")
    apply_to_environment(load_settings(config, {}), at_start)
    assert {name: os.environ[name] for name in SETTINGS_ENV if name in os.environ} == {"GORMES_MODEL_TIMEOUT": "30"}
