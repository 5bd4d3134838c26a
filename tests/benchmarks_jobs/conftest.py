from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench() -> ModuleType:
    """benchmarks/jobs.py, loaded as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_jobs", ROOT / "benchmarks" / "jobs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_jobs"] = module
    spec.loader.exec_module(module)
    return module
