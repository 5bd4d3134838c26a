"""The skills runtime: SKILL.md files validated like code, a resolver that says
why it chose a skill, routing evals, and promotion earned by evidence.

    model       the typed front matter, a skill, an issue
    loader      SKILL.md text -> Skill (errors name the file and the field)
    matching    how a trigger or an exclusion matches a phrase
    resolver    phrase -> chosen skill(s), scores, reasons; what may reach a prompt
    validator   `gormes skills check`: every rule, conflicts included
    evals       routing eval cases and their report
    promotion   one step up the ladder, when the evidence holds
    usage       selections and feedback as events; the skill_usage rows
"""

from __future__ import annotations

import os
from pathlib import Path

from gormes.data import shipped

SKILLS_DIR_ENV = "GORMES_SKILLS_DIR"
EVALS_DIR_ENV = "GORMES_SKILL_EVALS_DIR"
DEFAULT_SKILLS_DIR = "skills"
DEFAULT_EVALS_DIR = "evals/skills"


def skills_dir(explicit: str | Path | None = None, workspace: Path | None = None) -> Path:
    """Where the skills are: the explicit path, else $GORMES_SKILLS_DIR, else
    `skills/` in the workspace (or the working directory)."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(SKILLS_DIR_ENV)
    if from_env:
        return Path(from_env)
    return (workspace or Path(".")) / DEFAULT_SKILLS_DIR


def operator_skills_dir(explicit: str | Path | None = None) -> Path:
    """Where the operator's read commands (`skills check|list|route`, `eval skills`)
    find skills: as `skills_dir`, but with nothing given and no `skills/` here, the
    skills that ship with gormes, so the commands work from any directory. (Runs
    keep `skills_dir`: an agent sees its workspace's skills only.)"""
    chosen = skills_dir(explicit)
    if explicit or os.environ.get(SKILLS_DIR_ENV) or chosen.is_dir():
        return chosen
    return shipped(DEFAULT_SKILLS_DIR)


def operator_evals_dir(explicit: str | Path | None, skills_root: Path) -> Path:
    """The routing evals that go with `skills_root`: the explicit path, else
    $GORMES_SKILL_EVALS_DIR, else `evals/skills/` here when it exists, else the
    shipped evals when `skills_root` is the shipped skills (they are a pair). The
    path may not exist."""
    chosen = Path(explicit or os.environ.get(EVALS_DIR_ENV) or DEFAULT_EVALS_DIR)
    if explicit or os.environ.get(EVALS_DIR_ENV) or chosen.is_dir():
        return chosen
    if skills_root == shipped(DEFAULT_SKILLS_DIR):
        return shipped(*DEFAULT_EVALS_DIR.split("/"))
    return chosen
