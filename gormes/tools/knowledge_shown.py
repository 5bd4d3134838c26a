"""What a gateway or child agent is shown of a knowledge search: no host paths.

`knowledge.search` answered every caller with the knowledge root's absolute path
(`root`), GBrain's health as the operator's doctor reads it (`brain.detail`: the
gbrain executable's path, or the last line `gbrain doctor` printed when it
failed) and the same words in `fallback_reason`; a root it could not read was
named by its absolute path in the error. A remote client learned where the
operator's project lives and what its brain says of itself (decision 0074).

An operator and the system see the answer whole. Any other caller sees the
hits (their paths are relative to the root) with the root as `ROOT_SHOWN`,
GBrain's status word without its detail, a fallback reason of fixed words, and
an unreadable root's error without its path.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from gormes.knowledge import KnowledgeRootUnreadable
from gormes.knowledge.brain import BrainHealth
from gormes.knowledge.search import KnowledgeAnswer
from gormes.ops.spec import Caller
from gormes.tools.job_trust import privileged

ROOT_SHOWN = "(knowledge root)"
# The reasons search_knowledge gives in fixed words: shown as they are.
PLAIN_REASONS = frozenset({"gbrain found nothing", "no gbrain hit traces to a markdown file"})


def answer_for(caller: Caller, answer: KnowledgeAnswer) -> KnowledgeAnswer:
    """`answer` as `caller` may see it (see the module doc)."""
    if privileged(caller):
        return answer
    brain = BrainHealth(present=answer.brain.present, status=answer.brain.status)
    reason = answer.fallback_reason
    if reason is not None and reason not in PLAIN_REASONS:
        reason = f"no healthy gbrain: {brain.status}" if not brain.present else "gbrain search failed"
    return msgspec.structs.replace(answer, root=ROOT_SHOWN, brain=brain, fallback_reason=reason)


def unreadable_for(caller: Caller, error: KnowledgeRootUnreadable, root: Path) -> KnowledgeRootUnreadable:
    """The error of a root that cannot be read, as `caller` may see it."""
    if privileged(caller):
        return error
    return KnowledgeRootUnreadable(str(error).replace(str(root), ROOT_SHOWN))
