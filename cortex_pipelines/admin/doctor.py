"""`cortex doctor`: every store of one CORTEX_HOME checked, a line each, with the command that
repairs what is damaged. It only reads: the database is not migrated, no table is created."""

from __future__ import annotations

import errno
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from cortex_pipelines.config import Paths, Settings
from cortex_pipelines.ingest.inbox import rejected_files
from cortex_pipelines.memory.control import publish_now
from cortex_pipelines.memory.embedder import (
    mean_pooled_transformer,
    model_dimensions,
    query_export_path,
    resolve_model_path,
)
from cortex_pipelines.memory.models import INSTALLABLE
from cortex_pipelines.memory.pipeline import EPISODIC_CURSOR, forget_index
from cortex_pipelines.memory.snapshot import Snapshot
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore, vector_store
from cortex_pipelines.storage import Database, backup, dagster_sqlite, health, lease
from cortex_pipelines.storage.health import REPAIR_VECTORS, RESTORE, one_line
from cortex_pipelines.storage.migrations import MIGRATIONS

INIT = "cortex init"
# The Dagster daemon reports every 30 s: a report younger than this means `cortex dev` runs.
DAEMON_ALIVE_S = 90
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
        lost = backup.lost(paths.db)
        return Check(
            "duckdb", paths.db, False, f"{paths.db} is missing", lost.repair_command if lost else INIT
        ), None

    def look(con):
        episodes_due, sessions = health.indexed_session_ids(con, EPISODIC_CURSOR)
        facts_fresh, facts = health.indexed_facts(con)
        expected = _Expected(episodes_due, sessions, facts_fresh, facts)
        return health.schema_version(con), health.table_scan(con), health.database_size(con), expected

    try:
        version, counts, size, expected = Database(paths.db).examine(look)
    except (duckdb.Error, OSError) as exc:
        damage = health.as_store_damaged(exc, paths)
        why = _why(damage, paths) if damage else f"cannot be read: {one_line(exc)}"
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


def _why(damage: health.StoreDamaged, paths: Paths) -> str:
    """What keeps the file from opening: its own bytes, or what holds it ("cortex.duckdb is
    read-only" read like a chmod problem when its whole file system is)."""
    if damage.path == paths.db and damage.repair_command != health.REMOUNT:
        return damage.reason
    return f"cannot be opened: {damage.store} {damage.path} {damage.reason}"


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


WEIGHTS = ("*.safetensors", "pytorch_model.bin")


def _embeddings(settings: Settings, vectors: VectorStore) -> Check:
    """The embedding model the settings name: its weights on disk (a folder that lost them passed
    the start-up check, then every indexing run failed), its query export, and whether every
    table's vectors are its own (another model's are re-embedded by the next run: not damage)."""
    name = settings.embedding_model
    source = Path(resolve_model_path(name))
    others = {vectors.embedded_by(table)[0] for table in (EPISODIC, SEMANTIC) if vectors.exists(table)}
    pending = (
        f"; vectors still {', '.join(sorted(others - {name}))}'s: the next `cortex run` re-embeds"
        if others - {name}
        else ""
    )
    if not source.is_dir():  # a name in the Hugging Face cache, checked at start-up
        return Check("embeddings", source, True, f"{name} (from the Hugging Face cache){pending}")
    if not any(next(source.glob(pattern), None) for pattern in WEIGHTS):
        repair = f"cortex model install {name}" if name in INSTALLABLE else "put the model's files back"
        whose = f" for {name}" if name != str(source) else ""
        return Check("embeddings", source, False, f"no weights in {source}{whose}", repair)
    detail = f"{name}, {model_dimensions(source) or '?'} dims"
    if mean_pooled_transformer(source):
        made = query_export_path(name, source).is_file()
        detail += ", query encoder " + ("ready" if made else "not made yet (the first query makes it)")
    return Check("embeddings", source, True, detail + pending)


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
        repair = "remount its file system read-write" if exc.errno == errno.EROFS else f"chmod u+rwx {folder}"
        return Check(store, folder, False, f"{folder} is not writable ({exc.strerror})", repair)
    return Check(store, folder, True, f"{folder}: writable")


def _outbox(paths: Paths) -> Check:
    """outbox/ and each channel's folder in it, where the reply files are written."""
    found = _writable("outbox", paths.outbox)
    if not found.ok:
        return found
    try:
        channels = sorted(c for c in paths.outbox.iterdir() if c.is_dir() and not c.name.startswith("."))
    except OSError as exc:
        return Check(
            "outbox",
            paths.outbox,
            False,
            f"{paths.outbox} is not readable ({exc.strerror})",
            f"chmod u+rwx {paths.outbox}",
        )
    return next((c for c in (_writable("outbox", channel) for channel in channels) if not c.ok), found)


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
        _embeddings(settings, vectors),
        _snapshots(vectors),
        _inbox(paths),
        _writable("outputs", paths.out),
        _outbox(paths),
        _writable("home", paths.home),  # DuckDB creates its write-ahead log beside its file
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


@dataclass
class Restored:
    """What a restore did, for the lines it prints."""

    source: Path
    db: Path
    kept: Path | None  # the file it replaced
    # messages by inbox folder, history imported by file name, and replies; or why not counted
    later: tuple[dict[str, int], dict[str, int], int] | str
    replies_moved: int
    aside: Path
    ingested: Path

    def lines(self) -> list[str]:
        said = [f"restored {self.source} as {self.db}"]
        if self.kept:
            said.append(f"the file it replaced is kept as {self.kept}")
        if isinstance(self.later, str):
            said.append(
                f"what was said after the backup is rolled back (not counted: {self.later}); "
                f"`cortex ingest {self.ingested}` brings back the messages that came through the inbox, "
                f"and `cortex ingest --history FILE` any history imported after {_taken(self.source)}"
            )
        elif any(self.later[0].values()) or self.later[1] or self.later[2]:
            by_folder, imported, replies = self.later
            said.append(
                f"rolled back {sum(by_folder.values()) + sum(imported.values())} message(s) and "
                f"{replies} reply(ies) from after the backup{self._bring_back(by_folder, imported)}"
            )
        if self.replies_moved:
            said.append(f"moved {self.replies_moved} outbox file(s) of rolled-back replies to {self.aside}")
        return said

    def _bring_back(self, by_folder: dict[str, int], imported: dict[str, int]) -> str:
        """The command that brings each kind of message back (inbox files are kept in .ingested,
        imported history is in the files the user imported; those already restored are
        duplicates), and how many none can bring."""
        folders = sorted(f for f in by_folder if f)
        elsewhere = by_folder.get("", 0)
        told = ""
        if folders:
            where = self.ingested / folders[0] if len(folders) == 1 else self.ingested
            told = f"; `cortex ingest {where}` brings the messages back, to be answered again"
        if imported:
            told += (
                f"; `cortex ingest --history FILE` brings back the {sum(imported.values())} imported as "
                f"history (from {', '.join(sorted(imported))})"
            )
        if elsewhere:
            told += f"; {elsewhere} of them came by the gateway, an import or a schedule, which keep no file"
        return told


def _taken(source: Path) -> str:
    return f"{source.name} was taken ({backup.taken_at(source):%Y-%m-%d %H:%M} UTC)"


def _runs_in_flight(dagster_home: Path) -> list[str]:
    """Dagster runs of this home in flight (after the dead ones are failed), with their process."""
    if not (dagster_home / "dagster.yaml").is_file():
        return []
    from dagster import RunsFilter

    from cortex_pipelines.lanes import IN_FLIGHT, PID_TAG, reap_dead_runs, run_process

    with dagster_sqlite.open_instance(dagster_home) as instance:
        reap_dead_runs(instance)
        runs = instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT))
        pids = [run_process(instance, run.run_id) for run in runs]
    return [
        f"run {run.run_id[:8]} ({run.job_name}, pid {found[0] if found else run.tags.get(PID_TAG, '?')})"
        for run, found in zip(runs, pids, strict=True)
    ]


def _live_drainer(con, timeout_s: float) -> tuple[str, str, int] | None:
    return health.lease_holder(con, lease.NAME) if lease.holder_alive(con, timeout_s) else None


def _answering(settings: Settings) -> str | None:
    """Who answers messages in this home now. A `cortex run` holds DuckDB only for short
    transactions, so the file's lock alone misses it: its Dagster run is in flight, and it holds
    the brain lease while it drains (as `cortex chat` and an erasure do without a run)."""
    if runs := _runs_in_flight(settings.paths.dagster_home):
        return runs[0]
    if not settings.paths.db.exists():
        return None
    with backup.exclusive(settings.paths.db):  # refuses at once while a process keeps the file open
        pass
    try:
        holder = Database(settings.paths.db).examine(_live_drainer, settings.lease_timeout_s)
    except (duckdb.Error, OSError):
        return None  # a file that does not read is drained by nobody
    return f"pid {holder[2]} on {holder[1]} ({holder[0]})" if holder else None


def _backup_named(db_path: Path, chosen: str | None) -> Path:
    """The backup a restore brings back: a path, a name in the backups folder, or the newest that
    reads whole."""
    if chosen is None:
        return backup.newest_good(db_path)
    source = Path(chosen).expanduser()
    if not source.is_file():
        source = backup.folder(db_path) / chosen
    if not source.is_file():
        raise backup.NoSuchBackup(f"no backup {chosen} (see {backup.folder(db_path)})")
    return source


def rolled_back_by_restore(settings: Settings, chosen: str | None) -> str:
    """What a restore over a database that reads whole would roll back, in words: the count and the
    backup's age let the user judge the --yes it asks for. Vague when the backup does not read."""
    try:
        source = _backup_named(settings.paths.db, chosen)
        messages, replies = backup.examine(source, health.held)
        folders, imported, made = Database(settings.paths.db).examine(health.said_after, messages, replies)
    except (backup.BackupError, duckdb.Error, OSError):
        return "what was said since the backup"
    age = (datetime.now(UTC) - backup.taken_at(source)).total_seconds()
    history = f" ({sum(imported.values())} of them imported as history)" if imported else ""
    return (
        f"{sum(folders.values()) + sum(imported.values())} message(s){history} and {made} "
        f"reply(ies) said since {source.name} was taken ({_ago(age)})"
    )


def _ago(seconds: float) -> str:
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if unit == 'day' and count > 1 else ''} ago"
    return "just now"


def restore_refused(paths: Paths) -> str | None:
    """Why no restore may start, whatever the database holds: on a read-only file system every
    byte is intact and the restore could write none of its own (it crashed in Dagster's storage)."""
    if health.on_read_only_file_system(paths.home):
        return (
            f"the file system holding {paths.home} is read-only: nothing is damaged, so there is nothing "
            "to restore; remount it read-write (nothing was restored)"
        )
    try:  # at once: reading the database first waited a minute for the process holding it
        with backup.exclusive(paths.db):
            pass
    except backup.BackupError as exc:
        return str(exc)
    return None


def restore(settings: Settings, chosen: str | None) -> Restored:
    """Bring back the named backup (a path, or a name in the backups folder) or the newest that
    reads whole, unless a process is answering messages; set aside the outbox files of the replies
    it rolls back, and count what it rolled back from the file it replaced."""
    paths = settings.paths
    db_path = paths.db
    source = _backup_named(db_path, chosen)
    if who := _answering(settings):
        raise backup.BackupError(
            f"{who} is answering messages in this home: try again after it ends (a processing run "
            f"lingers {settings.brain_linger_seconds:g} s after its last answer; stopping `cortex dev` "
            "ends it); nothing was restored"
        )
    ago = dagster_sqlite.daemon_last_reported(paths.dagster_home)
    if ago is not None and ago < DAEMON_ALIVE_S:
        raise backup.BackupError(
            f"`cortex dev` is running in this home (its Dagster daemon reported {ago:.0f} s ago), and "
            "its sensors would start runs on the vectors the restore rebuilds: stop it, then try "
            "again; nothing was restored"
        )
    kept = backup.restore(db_path, source)
    # The vectors of the replaced file go at once, before the model loads for the rebuild: a
    # restore killed meanwhile left them answering from rolled-back messages (QA, helper-27). A
    # backup from before a migration is migrated first.
    restored = Database(db_path)
    restored.migrate()
    forget_index(restored, vector_store(paths.lance))
    publish_now(restored, settings)  # out/ quoted rolled-back messages until their next refresh
    messages, replies = backup.examine(source, health.held)
    moved, aside = backup.set_aside_replies(paths.outbox, replies)
    return Restored(
        source,
        db_path,
        kept,
        _said_after(paths, kept, messages, replies),
        moved,
        aside,
        paths.ingested,
    )


def _said_after(paths: Paths, kept: Path | None, messages: set, replies: dict):
    """Messages (by inbox folder) and replies the replaced file holds beyond the backup, or why
    they cannot be counted. Read from the copy kept aside: no process holds it any more."""
    if kept is None:
        return f"{paths.db} was missing"
    try:
        return backup.examine(kept, health.said_after, messages, replies)
    except (duckdb.Error, OSError) as exc:
        damage = health.as_store_damaged(exc, paths)
        return f"{paths.db} {damage.reason if damage else one_line(exc)}"
