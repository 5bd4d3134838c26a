"""Reading SKILL.md files: front matter (YAML) into a typed `FrontMatter`, the
rest kept as the markdown body, byte for byte.

`parse_skill` is pure (text in, `Skill` out, or a `SkillFileError` naming the
file and the field); `load_skills` walks a directory and collects every file's
problem instead of stopping at the first.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gormes.contained import Root, entries
from gormes.ops.spec import InvalidOperationInput, PathOutsideWorkspace
from gormes.skillbook.errors import SkillFileError, SkillsDirMissing
from gormes.skillbook.model import FrontMatter, Issue, Skill

SKILL_FILE = "SKILL.md"
_DELIMITER = "---"
_AT = re.compile(r" - at `\$((?:\.[A-Za-z_][\w]*|\[\d+\])+)`$")
_UNKNOWN = re.compile(r"unknown field `([^`]+)`")
_MISSING = re.compile(r"missing required field `([^`]+)`")


class LoadResult(msgspec.Struct, frozen=True, kw_only=True):
    skills: list[Skill]
    issues: list[Issue]


def split_front_matter(text: str, file: str) -> tuple[str, str]:
    """(front matter YAML, body). The file must open with a `---` line and the
    front matter end at the next `---` line."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n") != _DELIMITER:
        raise SkillFileError(file, "does not start with a '---' front matter line", rule="front-matter")
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r\n") == _DELIMITER:
            return "".join(lines[1:index]), "".join(lines[index + 1:])
    raise SkillFileError(file, "front matter is not closed by a '---' line", rule="front-matter")


def parse_front_matter(source: str, file: str) -> FrontMatter:
    try:
        data: Any = yaml.safe_load(source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (front matter line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillFileError(file, f"broken YAML{where}: {problem}", rule="front-matter") from None
    if not isinstance(data, dict):
        raise SkillFileError(file, "front matter is not a YAML mapping", rule="front-matter")
    try:
        return msgspec.convert(data, FrontMatter)
    except msgspec.ValidationError as exc:
        field, message = _describe(str(exc))
        raise SkillFileError(file, message, rule="schema", field=field) from None


def parse_skill(text: str, path: Path, file: str | None = None) -> Skill:
    """Parse one SKILL.md's text; `file` is how errors name it (default: `path`)."""
    name = file or str(path)
    source, body = split_front_matter(text, name)
    return Skill(meta=parse_front_matter(source, name), body=body, path=path, file=name)


MAX_SKILL_BYTES = 1 << 20  # a SKILL.md larger than this is an issue, not read


def load_skills(root: Path) -> LoadResult:
    """Read every skill under root (one `NAME/SKILL.md` per subdirectory); problems
    become issues, one per file.

    The root is the operator's configuration and may itself be a link; below it,
    everything is read through `gormes.contained`, as the fs tools read the
    workspace: a skill directory or SKILL.md that is a link out of the root is an
    issue and is never read, and only a regular file is opened (a FIFO cannot block
    the read)."""
    if not root.is_dir():
        raise SkillsDirMissing(f"{root}: skills directory not found")
    skills: list[Skill] = []
    issues: list[Issue] = []
    shown_root = display_path(root)
    with Root(root, label="skills directory") as contained:
        for entry in entries(contained.fd):
            if entry.name.startswith(".") or entry.kind not in ("dir", "symlink"):
                continue
            file = f"{shown_root}/{entry.name}/{SKILL_FILE}"
            try:
                if entry.kind == "symlink" and not _is_dir(contained, entry.name):
                    continue  # a link to a file is no skill directory, as a plain file is not
                data, _ = contained.read_file(f"{entry.name}/{SKILL_FILE}", MAX_SKILL_BYTES)
            except PathOutsideWorkspace:
                issues.append(Issue(file=file, rule="front-matter",
                                    message="a symlink out of the skills directory: not read"))
                continue
            except InvalidOperationInput as exc:
                missing = str(exc).startswith("no such file")
                issues.append(Issue(file=file, rule="front-matter", message=(
                    f"no {SKILL_FILE} in this skill directory" if missing else f"cannot be read: {exc}")))
                continue
            if data is None:
                issues.append(Issue(file=file, rule="front-matter",
                                    message=f"cannot be read: larger than {MAX_SKILL_BYTES} bytes"))
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                issues.append(Issue(file=file, rule="front-matter", message=f"cannot be read: {exc}"))
                continue
            try:
                skills.append(parse_skill(text, root / entry.name / SKILL_FILE, file))
            except SkillFileError as exc:
                issues.append(Issue(file=exc.file, rule=exc.rule, field=exc.field, message=exc.detail))
    return LoadResult(skills=skills, issues=issues)


def _is_dir(contained: Root, name: str) -> bool:
    """Whether the link `name` leads to a directory inside the root (a link out
    raises `PathOutsideWorkspace`; a dangling one is no directory)."""
    try:
        with contained.locate(name) as where:
            return where.info is not None and stat.S_ISDIR(where.info.st_mode)
    except InvalidOperationInput:
        return False


def load_skill_file(path: Path) -> Skill:
    """One SKILL.md, or a `SkillFileError` naming it."""
    file = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SkillFileError(file, f"cannot be read: {exc.strerror or exc}", rule="front-matter") from None
    return parse_skill(text, path, file)


def _describe(error: str) -> tuple[str | None, str]:
    """(field path, message) from a msgspec validation error's text."""
    for pattern in (_UNKNOWN, _MISSING):
        found = pattern.search(error)
        if found:
            kind = "unknown field" if pattern is _UNKNOWN else "missing required field"
            path_found = _AT.search(error)
            prefix = _field_path(path_found.group(1)) + "." if path_found else ""
            return prefix + found.group(1), kind
    found = _AT.search(error)
    if found:
        return _field_path(found.group(1)), error[: found.start()].strip()
    return None, error


def _field_path(raw: str) -> str:
    return raw.lstrip(".")


def display_path(path: Path) -> str:
    """A path as errors show it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
