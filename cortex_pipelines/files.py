"""Atomic file writes: readers see the old file or the new one, never a torn one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

NAME_MAX = 255  # bytes in one file name (Linux, macOS)
_TMP_STEM = 200  # bytes of the target's name kept in the temporary name: room for mkstemp's part


def private_umask() -> None:
    """Files that DuckDB, LanceDB and Dagster create follow the umask, not our modes: mask group
    and others out in every Cortex process (the CLI and the Dagster code location set it)."""
    os.umask(os.umask(0o077) | 0o077)


def mtime_ns(path: os.PathLike | str) -> int | None:
    """A file's modification time in ns, None when it is not there (or cannot be stat'ed)."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def touch(path: Path) -> None:
    """Create or touch a user-only signal file; a failure is ignored (the signal only hastens what a
    poll or tick does anyway)."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.utime(path)


def write_atomic(path: Path, content: str | bytes) -> None:
    """Files are user-only (0600, from mkstemp): conversations and memory are private. The
    temporary name keeps only the start of a long name, so any name up to NAME_MAX can be written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = content.encode() if isinstance(content, str) else content
    stem = os.fsencode(path.name)[:_TMP_STEM].decode("utf-8", "ignore")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
