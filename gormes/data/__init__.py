"""The data that ships with gormes: the demo's model script, the price table, and
the project's own skills, routing evals and recall eval fixtures.

`demo_script.json` and `pricing.toml` sit in this package. The skills and evals
are kept at the top of the repository (`skills/`, `evals/`), where people read and
edit them; the wheel carries them here (`gormes/data/skills`, `gormes/data/evals`:
pyproject's `force-include`). `shipped(...)` finds them either way: in an installed
wheel, and in a checkout (an editable install included).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
# A checkout: the repository root, which holds pyproject.toml beside the package.
CHECKOUT = HERE.parent.parent


def shipped(*parts: str) -> Path:
    """The shipped copy of `skills`, `evals/skills` or `evals/recall` (any path under
    `skills/` or `evals/`). The path may not exist: in a source tree without them."""
    packaged = HERE.joinpath(*parts)
    if packaged.exists() or not (CHECKOUT / "pyproject.toml").is_file():
        return packaged
    return CHECKOUT.joinpath(*parts)
