"""Opening a provider loads its SDK and builds its client. A model turn is
admitted by the shared rate limits and back-off (gormes/control/rate_limits.py)
just before its request leaves; the SDK's import takes a second or two, so a
first turn that imported it after admission sent its request that long after,
past a back-off another worker had been told of meanwhile. The scripted
provider loads neither SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDKS = ("openai", "anthropic")


def loaded_after_opening(spec: str) -> dict[str, bool]:
    code = (
        "import json, sys\n"
        "from gormes.providers import open_provider\n"
        f"before = {{m: m in sys.modules for m in {SDKS!r}}}\n"
        f"open_provider({spec!r}, **({{}} if {spec!r}.startswith('scripted') else "
        "{'api_key': 'k', 'base_url': 'http://127.0.0.1:9'}))\n"
        f"print(json.dumps({{'before': before, 'after': {{m: m in sys.modules for m in {SDKS!r}}}}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert not any(seen["before"].values()), seen  # importing gormes.providers loads no SDK
    return seen["after"]


@pytest.mark.parametrize("scheme", SDKS)
def test_opening_a_provider_loads_its_sdk_before_any_turn(scheme: str) -> None:
    after = loaded_after_opening(f"{scheme}:some-model")
    assert after[scheme], after


def test_the_scripted_provider_loads_no_sdk() -> None:
    script = REPO / "gormes" / "data" / "demo_script.json"
    assert loaded_after_opening(f"scripted:{script}") == {"openai": False, "anthropic": False}
