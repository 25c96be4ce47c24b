"""Looking into an instance's stores from a test, once no cortex process holds them."""

from __future__ import annotations

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
