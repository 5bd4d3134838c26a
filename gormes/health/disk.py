"""Disk check: free space on the filesystem that holds the database."""

from __future__ import annotations

from gormes.health import Check, DoctorContext, Verdict, fail, ok, size, warn


def free_space(ctx: DoctorContext) -> tuple[int, int]:
    """(bytes an unprivileged process may still write, filesystem size in bytes)."""
    directory = ctx.path.parent if ctx.path.parent.exists() else ctx.path.anchor
    stats = ctx.statvfs(str(directory))
    return stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize


def check_free(ctx: DoctorContext) -> Verdict:
    t = ctx.thresholds
    free, total = free_space(ctx)
    fraction = free / total if total else 0.0
    text = f"{size(free)} free of {size(total)} ({fraction:.0%}) where {ctx.path.name} lives"
    remedy = "free space on that filesystem or move the database (--db) to a larger one"
    if free < t.disk_fail_bytes:
        return fail(
            f"{text}: under {size(t.disk_fail_bytes)}, writes will soon fail (nothing is lost, "
            "but nothing new is recorded)", remedy,
        )
    if free < t.disk_warn_bytes or fraction < t.disk_warn_fraction:
        return warn(f"{text}: under {size(t.disk_warn_bytes)} or {t.disk_warn_fraction:.0%}", remedy)
    return ok(text)


CHECKS = [Check(
    name="disk.free", category="disk", run=check_free, needs_database=False, backend="sqlite",
    elsewhere="the database's disk is the PostgreSQL server's: a client cannot see its free "
    "space (disk.database_size reports the size)",
)]
