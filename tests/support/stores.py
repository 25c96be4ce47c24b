"""Looking into an instance's stores from a test, once no cortex process holds them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb


def files_holding(home: Path, needle: str) -> list[str]:
    """`grep -r -a -i NEEDLE $CORTEX_HOME`: every file's bytes, binary ones included."""
    wanted = needle.lower().encode()
    return sorted(
        str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and wanted in p.read_bytes().lower()
    )


def read_only(home: Path, sql: str) -> list[tuple]:
    """A peek into DuckDB (read-only, so it fails rather than waits while a process writes)."""
    con = duckdb.connect(str(home / "cortex.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@contextmanager
def held_by_another_process(db_path: Path) -> Iterator[None]:
    """Another process holds the DuckDB file (DuckDB lets one process open it) until the block ends."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys; con = duckdb.connect({str(db_path)!r}); print('held', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("", timeout=30)


def read_only_mount(folder: Path) -> list[str] | None:
    """A command line that runs its command with `folder` bind-mounted read-only over itself, in a
    mount namespace of its own: writes there fail with EROFS as on a file system remounted
    read-only, and nothing outside the command sees it or needs unmounting. Root uses a mount
    namespace, another user a user namespace too; None where neither is allowed here."""
    namespace = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        namespace[1:1] = ["--user", "--map-root-user"]
    script = 'mount --rbind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    wrap = [*namespace, "--", "sh", "-c", script, str(folder)]
    try:
        probe = subprocess.run([*wrap, "sh", "-c", 'touch "$0/.probe"', str(folder)], capture_output=True)
    except FileNotFoundError:  # no unshare
        return None
    if probe.returncode == 0 or b"Read-only file system" not in probe.stderr:
        (folder / ".probe").unlink(missing_ok=True)
        return None
    return wrap
