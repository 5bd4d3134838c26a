"""Where the operator's commands find skills, routing evals and recall fixtures:
what is given, else what is here, else the copy that ships with gormes (in this
checkout: the repository's own skills/ and evals/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gormes.data import shipped
from gormes.recall.eval_fixtures import fixtures_dir
from gormes.skillbook import EVALS_DIR_ENV, SKILLS_DIR_ENV, operator_evals_dir, operator_skills_dir, skills_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(SKILLS_DIR_ENV, raising=False)
    monkeypatch.delenv(EVALS_DIR_ENV, raising=False)
    return tmp_path


def test_in_a_checkout_the_shipped_copy_is_the_repository_s_own():
    assert shipped("skills") == REPO / "skills"
    assert shipped("evals", "skills") == REPO / "evals" / "skills"
    assert shipped("evals", "recall") == REPO / "evals" / "recall"


def test_with_nothing_here_the_operator_reads_the_shipped_pair(elsewhere):
    root = operator_skills_dir()
    assert root == shipped("skills")
    assert operator_evals_dir(None, root) == shipped("evals", "skills")
    assert fixtures_dir() == shipped("evals", "recall")
    assert skills_dir() == Path("skills")  # what runs read is unchanged: the workspace's own


def test_what_is_here_wins_and_its_evals_are_not_taken_from_the_shipped_set(elsewhere):
    (elsewhere / "skills").mkdir()
    root = operator_skills_dir()
    assert root == Path("skills")
    assert operator_evals_dir(None, root) == Path("evals/skills")  # absent: no probes, as before
    (elsewhere / "evals" / "recall").mkdir(parents=True)
    assert fixtures_dir() == Path("evals/recall")


def test_what_is_given_wins_even_when_it_does_not_exist(elsewhere, monkeypatch):
    assert operator_skills_dir("mine") == Path("mine")
    assert operator_evals_dir("cases", shipped("skills")) == Path("cases")
    assert fixtures_dir("f.yaml") == Path("f.yaml")
    monkeypatch.setenv(SKILLS_DIR_ENV, "from-env")
    monkeypatch.setenv(EVALS_DIR_ENV, "evals-from-env")
    assert operator_skills_dir() == Path("from-env")
    assert operator_evals_dir(None, shipped("skills")) == Path("evals-from-env")
