"""knowledge.search and knowledge.write: the project's markdown knowledge.

Search answers "what did we decide about X?", through a healthy GBrain brain or
our own index (see gormes/knowledge/). Every hit cites its markdown file; a hit
that cannot be traced to one says `trusted: false`. Write puts markdown on disk
first, then re-indexes. The root is the one given to `knowledge_operations`,
else $GORMES_KNOWLEDGE_ROOT, else `.writ/` in the workspace. Both read and write
the root through gormes/contained.py, as the fs tools read the workspace: a
link pointing out of the root is never read, indexed or written through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from gormes.knowledge import KnowledgeRootUnreadable, knowledge_root
from gormes.knowledge.brain import BrainConfig
from gormes.knowledge.search import KnowledgeAnswer, search_knowledge
from gormes.knowledge.write import WriteResult, write_knowledge
from gormes.ops.spec import OperationContext, OperationSpec
from gormes.tools.knowledge_shown import answer_for, unreadable_for

EVERYONE = frozenset({"operator", "gateway", "child-agent", "system"})
WRITERS = frozenset({"operator", "child-agent", "system"})


class KnowledgeSearchInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Search the project's markdown knowledge (decisions, notes) for what was decided."""

    query: Annotated[str, msgspec.Meta(min_length=1, description="What to look for, e.g. 'the database choice'.")]
    limit: Annotated[int, msgspec.Meta(ge=1, le=50, description="At most this many hits.")] = 5


class KnowledgeWriteInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Write a markdown page of project knowledge (the file is the record)."""

    path: Annotated[str, msgspec.Meta(min_length=1, description="Inside the knowledge root, ending in .md.")]
    text: Annotated[str, msgspec.Meta(description="Markdown to write.")]
    append: Annotated[bool, msgspec.Meta(description="Append to the file instead of replacing it.")] = False


def knowledge_operations(root: Path | None = None, brain: BrainConfig | None = None) -> tuple[OperationSpec, ...]:
    def where(ctx: OperationContext) -> Path:
        return knowledge_root(root, workspace=ctx.workspace)

    async def search(ctx: OperationContext, value: KnowledgeSearchInput) -> KnowledgeAnswer:
        # A gateway or child agent is shown no host path (knowledge_shown.py).
        at = where(ctx)
        try:
            answer = await search_knowledge(value.query, root=at, limit=value.limit, brain=brain)
        except KnowledgeRootUnreadable as exc:
            raise unreadable_for(ctx.caller, exc, at) from None
        return answer_for(ctx.caller, answer)

    async def write(ctx: OperationContext, value: KnowledgeWriteInput) -> WriteResult:
        at = where(ctx)
        try:
            return await write_knowledge(value.path, value.text, root=at, append=value.append, brain=brain)
        except KnowledgeRootUnreadable as exc:  # a child agent is told no host path either
            raise unreadable_for(ctx.caller, exc, at) from None

    return (
        OperationSpec(
            name="knowledge.search",
            description="Search the project's markdown knowledge: 'what did we decide about X?'. "
            "Each hit cites its markdown file; trusted=false means it could not be traced to one.",
            input_type=KnowledgeSearchInput, output_type=KnowledgeAnswer, handler=search,
            trust=EVERYONE, audit_kind="knowledge.read", prompt_visible=True, timeout=30.0,
        ),
        OperationSpec(
            name="knowledge.write",
            description="Write (or append to) a markdown page of project knowledge, then re-index it.",
            input_type=KnowledgeWriteInput, output_type=WriteResult, handler=write,
            trust=WRITERS, audit_kind="knowledge.write", prompt_visible=True, mutating=True,
            idempotent=False, timeout=90.0, write_ahead=True,  # a file, no transaction
        ),
    )


SPECS = knowledge_operations()
