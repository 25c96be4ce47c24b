"""`cortex doctor`: every store of one CORTEX_HOME checked, a line each, with the command that
repairs what is damaged. It only reads: the database is not migrated, no table is created."""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb

from cortex_pipelines.config import Paths, Settings
from cortex_pipelines.ingest.inbox import rejected_files
from cortex_pipelines.memory.pipeline import EPISODIC_CURSOR
from cortex_pipelines.memory.snapshot import Snapshot
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore
from cortex_pipelines.storage import Database, backup, health
from cortex_pipelines.storage.health import REPAIR_VECTORS, RESTORE, one_line
from cortex_pipelines.storage.migrations import MIGRATIONS

INIT = "cortex init"
# A checkpoint, a backup and a snapshot each need about the database's size again.
MIN_FREE_BYTES = 200 * 1024 * 1024
_VERSION = re.compile(r"^v(\d+)$")


@dataclass
class Check:
    store: str
    path: Path
    ok: bool
    detail: str
    repair: str | None = None

    def line(self) -> str:
        if self.ok:
            return f"{self.store:<18} ok       {self.detail}"
        return f"{self.store:<18} damaged  {self.detail} → {self.repair}"

    def as_dict(self) -> dict:
        return {
            "store": self.store,
            "path": str(self.path),
            "ok": self.ok,
            "detail": self.detail,
            "repair": self.repair,
        }


@dataclass
class _Expected:
    """What LanceDB must hold according to DuckDB."""

    episodes_due: set[int]
    sessions: set[int]
    facts_fresh: dict[int, str]  # fact id → status, for facts whose LanceDB row is up to date
    facts: set[int]


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _duckdb(paths: Paths) -> tuple[Check, _Expected | None]:
    if not paths.db.exists():
        repair = RESTORE if backup.backups(paths.db) else INIT
        return Check("duckdb", paths.db, False, f"{paths.db} is missing", repair), None

    def look(con):
        episodes_due, sessions = health.indexed_session_ids(con, EPISODIC_CURSOR)
        facts_fresh, facts = health.indexed_facts(con)
        expected = _Expected(episodes_due, sessions, facts_fresh, facts)
        return health.schema_version(con), health.table_scan(con), health.database_size(con), expected

    try:
        version, counts, size, expected = Database(paths.db).examine(look)
    except (duckdb.Error, OSError) as exc:
        damage = health.as_store_damaged(exc, paths)
        why = damage.reason if damage else f"cannot be read: {one_line(exc)}"
        return Check(
            "duckdb", paths.db, False, f"{paths.db} {why}", damage.repair_command if damage else RESTORE
        ), None
    latest = MIGRATIONS[-1][0]
    detail = (
        f"{paths.db}: schema v{version}, {len(counts)} tables, {sum(counts.values())} rows, "
        f"{size.get('database_size', '?')}"
    )
    if version > latest:
        return Check(
            "duckdb", paths.db, False, f"{detail}, newer than this Cortex (v{latest})", "upgrade Cortex"
        ), None
    if version < latest:
        return Check("duckdb", paths.db, False, f"{detail}, older than v{latest}", INIT), expected
    return Check("duckdb", paths.db, True, detail), expected


def _backups(paths: Paths) -> Check:
    found = backup.backups(paths.db)
    where = backup.folder(paths.db)
    if not found:
        return Check("backups", where, True, f"{where}: none yet (taken daily and before each migration)")
    try:
        version = backup.verify(found[0])
    except (duckdb.Error, OSError) as exc:
        return Check(
            "backups",
            found[0],
            False,
            f"the newest backup {found[0]} is unreadable: {one_line(exc)}",
            f"remove {found[0].name}; a new one is taken by the next command",
        )
    return Check("backups", where, True, f"{where}: {len(found)}, newest {found[0].name} (schema v{version})")


def _lance_table(vectors: VectorStore, name: str, expected: _Expected | None) -> Check:
    where = vectors.path / f"{name}.lance"
    store = f"lancedb {name}"
    due = (expected.episodes_due if name == EPISODIC else set(expected.facts_fresh)) if expected else set()
    try:
        if not vectors.exists(name):
            if due:
                return Check(
                    store, where, False, f"{where} is missing ({len(due)} rows expected)", REPAIR_VECTORS
                )
            return Check(store, where, True, f"{where}: empty")
        data = vectors.table(name).to_arrow()  # every row and column: a missing fragment fails here
    except Exception as exc:  # lance raises RuntimeError, OSError or ValueError for its own files
        return Check(store, where, False, f"{where} is unreadable: {one_line(exc)}", REPAIR_VECTORS)
    detail = f"{where}: {data.num_rows} rows"
    if expected is None:
        return Check(store, where, True, f"{detail} (not compared: DuckDB unreadable)")
    ids = data.column("id").to_pylist()
    known = expected.sessions if name == EPISODIC else expected.facts
    problems = []
    if missing := due - set(ids):
        problems.append(f"{len(missing)} of DuckDB's rows missing")
    if unknown := set(ids) - known:
        problems.append(f"{len(unknown)} rows DuckDB does not have")
    if name == SEMANTIC:
        status = dict(zip(ids, data.column("status").to_pylist(), strict=True))
        active = sum(1 for s in expected.facts_fresh.values() if s == "active")
        detail += f", {active} active facts in DuckDB"
        if stale := [i for i, s in expected.facts_fresh.items() if i in status and status[i] != s]:
            problems.append(f"{len(stale)} rows with another status than DuckDB's")
    if problems:
        return Check(store, where, False, f"{detail}: {', '.join(problems)}", REPAIR_VECTORS)
    return Check(store, where, True, detail)


def _snapshots(vectors: VectorStore) -> Check:
    damaged, loaded = [], 0
    for name in (EPISODIC, SEMANTIC):
        saved = vectors._saved_snapshots(name)  # the store's own layout of saved recall snapshots
        for version in sorted(saved.iterdir()) if saved.is_dir() else []:
            if not (m := _VERSION.match(version.name)):
                continue
            try:
                Snapshot.load(saved, int(m.group(1)))
                loaded += 1
            except Exception as exc:  # numpy, arrow, bm25s and checksum errors alike: not whole
                damaged.append(f"{name}/{version.name} ({one_line(exc, 80)})")
    where = vectors.path.with_name(vectors.path.name + "-snapshots")
    if damaged:
        return Check(
            "recall snapshots", where, False, f"{where}: damaged {', '.join(damaged)}", REPAIR_VECTORS
        )
    return Check(
        "recall snapshots", where, True, f"{where}: {f'{loaded} saved, all load' if loaded else 'none saved'}"
    )


def _inbox(paths: Paths) -> Check:
    unreadable = []
    for folder in [paths.inbox, *sorted(paths.inbox.iterdir() if paths.inbox.is_dir() else [])]:
        if folder != paths.inbox and (folder.name.startswith(".") or not folder.is_dir()):
            continue
        try:
            entries = sorted(folder.iterdir())
        except OSError as exc:
            unreadable.append(f"{folder} ({exc.strerror})")
            continue
        for entry in entries:
            if folder == paths.inbox or not entry.is_file():
                continue
            try:
                with open(entry, "rb"):
                    pass
            except OSError as exc:
                unreadable.append(f"{entry} ({exc.strerror})")
    if unreadable:
        shown = ", ".join(unreadable[:3]) + (
            f" and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
        )
        return Check(
            "inbox",
            paths.inbox,
            False,
            f"{len(unreadable)} unreadable: {shown}",
            "fix their permissions or move them out",
        )
    rejected = rejected_files(paths)
    aside = f"; {rejected} file(s) rejected, see the .error notes in {paths.rejected}" if rejected else ""
    return Check("inbox", paths.inbox, True, f"{paths.inbox}: readable{aside}")


def _writable(store: str, folder: Path) -> Check:
    if not folder.is_dir():
        return Check(store, folder, False, f"{folder} is missing", INIT)
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return Check(
            store, folder, False, f"{folder} is not writable ({exc.strerror})", f"chmod u+rwx {folder}"
        )
    return Check(store, folder, True, f"{folder}: writable")


def _disk(paths: Paths) -> Check:
    free = shutil.disk_usage(paths.home).free
    need = max(MIN_FREE_BYTES, 2 * (paths.db.stat().st_size if paths.db.exists() else 0))
    detail = f"{paths.home}: {_size(free)} free"
    if free < need:
        return Check("disk", paths.home, False, f"{detail}, less than {_size(need)}", health.FREE_SPACE)
    return Check("disk", paths.home, True, detail)


def _dagster_home(paths: Paths) -> Check:
    config = paths.dagster_yaml
    if not config.is_file():
        return Check("dagster home", paths.dagster_home, False, f"{config} is missing", INIT)
    return Check("dagster home", paths.dagster_home, True, f"{paths.dagster_home}: dagster.yaml present")


def check_all(settings: Settings) -> list[Check]:
    paths = settings.paths
    if not paths.home.is_dir():
        return [Check("home", paths.home, False, f"{paths.home} does not exist", INIT)]
    database, expected = _duckdb(paths)
    vectors = VectorStore(paths.lance)  # its own handles: nothing cached from before a repair
    return [
        database,
        _backups(paths),
        _lance_table(vectors, EPISODIC, expected),
        _lance_table(vectors, SEMANTIC, expected),
        _snapshots(vectors),
        _inbox(paths),
        _writable("outputs", paths.out),
        _writable("outbox", paths.outbox),
        _disk(paths),
        _dagster_home(paths),
    ]


def database_whole(settings: Settings) -> bool:
    """Whether every table of the DuckDB file reads through, at any schema (an older one is migrated
    by `cortex init`, a newer one wants a newer Cortex): restoring over it then rolls back what was
    said since the backup, which must be asked for."""
    if not settings.paths.db.exists():
        return False
    try:
        Database(settings.paths.db).examine(health.table_scan)
    except (duckdb.Error, OSError):
        return False
    return True


def restore(settings: Settings, chosen: str | None) -> tuple[Path, Path | None]:
    """Bring back the named backup (a path, or a name in the backups folder) or the newest that
    reads whole; returns it and where the file it replaced was kept."""
    db_path = settings.paths.db
    if chosen is None:
        source = backup.newest_good(db_path)
    else:
        source = Path(chosen).expanduser()
        if not source.is_file():
            source = backup.folder(db_path) / chosen
        if not source.is_file():
            raise backup.BackupError(f"no backup {chosen} (see {backup.folder(db_path)})")
    return source, backup.restore(db_path, source)
