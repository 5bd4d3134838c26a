"""The skillbook's errors: each is one line a person can act on."""

from __future__ import annotations

from gormes.errors import UserError


class SkillsError(UserError):
    """Base of the skillbook's user-facing errors."""


class SkillsDirMissing(SkillsError):
    """The skills directory does not exist (or is not a directory)."""


class SkillFileError(SkillsError):
    """A SKILL.md that cannot be read as a skill; names the file and the field."""

    def __init__(self, file: str, message: str, *, rule: str, field: str | None = None) -> None:
        where = file if field is None else f"{file}: field {field!r}"
        super().__init__(f"{where}: {message}")
        self.file = file
        self.rule = rule
        self.field = field
        self.detail = message


class UnknownSkill(SkillsError):
    """No skill of that name (or not one the caller may see)."""


class PromotionRefused(SkillsError):
    """The evidence rule does not hold for the promotion asked for."""


class EvalFileError(SkillsError):
    """A routing eval file that cannot be read."""
