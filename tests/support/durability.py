"""The invariants a crash test checks once every message has been drained: each message answered
exactly once, its reply in the outbox once and exported as one file, the DuckDB file clean."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb

from cortex_pipelines.storage import Database


def outbox_files(home: Path) -> list[str]:
    """Every file under outbox/ (temporary files included), as channel/name."""
    root = home / "outbox"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def fetch_all(con, sql: str, params: list | tuple = ()) -> list[tuple]:
    return con.execute(sql, params).fetchall()


def fetch_dicts(con, sql: str, params: list | tuple = ()) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def assert_durable(home: Path, db: Database, total: int) -> None:
    """The invariants that must hold once every message has been drained (one short transaction)."""
    with db.transaction() as con:
        states = Counter(dict(fetch_all(con, "SELECT state, count(*) FROM bus GROUP BY state")))
        ids = [r[0] for r in fetch_all(con, "SELECT id FROM bus ORDER BY id")]
        per_role = Counter(fetch_all(con, "SELECT bus_id, role FROM session"))
        checkpoints = Counter(r[0] for r in fetch_all(con, "SELECT bus_id FROM checkpoints"))
        rows = fetch_dicts(con, "SELECT id, bus_id, channel, text, exported_at FROM outbox ORDER BY id")
        ops = fetch_dicts(con, "SELECT id, status, result, acknowledged_at FROM pending_ops")

    assert states == {"completed": total}, states  # nothing pending, processing, failed or skipped
    assert len(ids) == total
    for bus_id in ids:
        assert per_role[(bus_id, "user")] == 1, f"bus {bus_id}: user turns {per_role[(bus_id, 'user')]}"
        assert per_role[(bus_id, "assistant")] == 1, (
            f"bus {bus_id}: assistant turns {per_role[(bus_id, 'assistant')]}"
        )
    assert sum(per_role.values()) == 2 * total
    assert sorted(checkpoints) == ids and set(checkpoints.values()) == {1}, checkpoints

    pairs = Counter((r["bus_id"], r["channel"]) for r in rows)
    assert all(c == 1 for c in pairs.values()), f"duplicate outbox rows: {pairs}"
    assert all(r["exported_at"] is not None for r in rows), "outbox rows left unexported"
    root = home / "outbox"
    files = outbox_files(home)
    expected = sorted(f"{r['channel']}/{r['id']:010d}.json" for r in rows)
    assert files == expected, f"outbox files {files} != rows {expected}"
    for r in rows:
        body = json.loads((root / r["channel"] / f"{r['id']:010d}.json").read_text(encoding="utf-8"))
        assert (body["id"], body["channel"], body["text"]) == (r["id"], r["channel"], r["text"])

    # Ops: every failure is an orphan of a crash and has been shown (acknowledged) once.
    for op in ops:
        if op["status"] == "failed":
            assert "orphaned" in op["result"] and op["acknowledged_at"] is not None, op

    # The file opens cleanly in a plain DuckDB connection (WAL replayed, checkpointable).
    con = duckdb.connect(str(db.path))
    try:
        assert con.execute("SELECT count(*) FROM bus").fetchone()[0] == total
        con.execute("CHECKPOINT")
    finally:
        con.close()
