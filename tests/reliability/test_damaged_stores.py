"""Damaged stores, through the real `cortex` CLI: a truncated or zeroed DuckDB file, a deleted LanceDB
fragment, a full disk. Every command says one line naming the store and the command that repairs it;
`cortex doctor` finds the damage and repairs it; recall degrades to full text instead of failing."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pytest

from cortex_pipelines.config import Paths, load_settings
from cortex_pipelines.instance import init_home
from cortex_pipelines.storage import Database, backup
from cortex_pipelines.storage import db as db_module
from cortex_pipelines.storage.health import as_store_damaged
from cortex_pipelines.storage.migrations import MIGRATIONS
from tests.support.messages_server import MessagesServer
from tests.support.messages_server import text as reply_text
from tests.support.stores import held_by_another_process, read_only

pytestmark = pytest.mark.timeout(300)

QUESTION = "Where does my sister live?"


def _env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "ANTHROPIC_"))}
    env.pop("DAGSTER_HOME", None)
    # transformers draws a progress bar on stderr while it loads the embedder: not Cortex's line
    env.update({"CORTEX_HOME": str(home), "HF_HUB_DISABLE_PROGRESS_BARS": "1", **(extra or {})})
    return env


def cortex(*args: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cortex_pipelines.cli", *args],
        env=_env(home, env),
        capture_output=True,
        text=True,
        timeout=240,
    )


def _one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The command failed with exactly one stderr line, `cortex: ...`, that says each needle."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("cortex: ") and all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def _doctor_lines(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {line[:18].strip(): line[18:].strip() for line in proc.stdout.splitlines()}


@pytest.fixture(scope="module")
def answered_home(tmp_path_factory) -> Path:
    """An instance that has answered two messages, extracted a fact and indexed both LanceDB tables,
    with today's backup taken after it (the day's first command takes it)."""
    home = tmp_path_factory.mktemp("answered") / "home"
    every_turn = {"CORTEX_EXTRACTION_EVERY_TURNS": "1"}
    for text in (
        "My sister Ana lives in Porto and loves sailing.",
        "I work as a nurse at the city hospital.",
    ):
        assert cortex("send", "webchat", text, home=home).returncode == 0
    run = cortex("run", home=home, env=every_turn)
    assert run.returncode == 0, run.stderr
    shutil.rmtree(home / "backups")
    assert cortex("status", home=home).returncode == 0  # the first command of the day backs up
    assert len(backup.backups(Paths(home).db)) == 1
    return home


@pytest.fixture
def home(answered_home, tmp_path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(answered_home, copy)
    return copy


def _truncate(path: Path) -> None:
    """Keep DuckDB's three 4 KiB headers and lose every block after them. (A file cut in half may keep
    the blocks some commands read: those work and the others fail, each with its line.)"""
    with open(path, "r+b") as fh:
        fh.truncate(3 * 4096)


def _zero(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)


def _fails_in_one_line_everywhere(home: Path) -> None:
    db_path = Paths(home).db
    for args in (("status",), ("recall", "sister"), ("run",), ("send", "webchat", "hello again")):
        _one_line(cortex(*args, home=home), "DuckDB", str(db_path), "cortex doctor --restore")
    assert not list((home / "inbox" / "webchat").glob("*.json"))  # send queued nothing it cannot store
    doctor = cortex("doctor", home=home)
    assert doctor.returncode == 1 and doctor.stderr == ""
    assert _doctor_lines(doctor)["duckdb"].startswith("damaged")
    assert "→ cortex doctor --restore" in _doctor_lines(doctor)["duckdb"]


def test_a_truncated_duckdb_file_is_one_line_for_every_command(home):
    _truncate(Paths(home).db)
    _fails_in_one_line_everywhere(home)


def test_a_zeroed_duckdb_file_is_one_line_for_every_command_and_doctor_restores_the_backup(home):
    db_path = Paths(home).db
    before = json.loads(cortex("status", "--json", home=home).stdout)
    _zero(db_path)
    damaged = db_path.read_bytes()
    _fails_in_one_line_everywhere(home)

    restored = cortex("doctor", "--restore", home=home)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    kept = list(home.glob("cortex.duckdb.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == damaged  # moved aside, never deleted
    after = json.loads(cortex("status", "--json", home=home).stdout)
    assert after["bus"] == before["bus"] and after["memory"] == before["memory"]


def test_a_deleted_duckdb_file_fails_every_command_in_one_line_and_creates_nothing(home):
    """Any command made a new empty file in its place: `status` said zero messages, `run` answered
    from the old vectors and overwrote the outbox's files, `--repair-vectors` wiped the vectors, and
    the next day's backup of the empty file pushed the good ones out."""
    db_path = Paths(home).db
    db_path.unlink()
    kept = {p: p.read_bytes() for p in [*backup.backups(db_path), *(home / "outbox").rglob("*.json")]}
    vectors = sorted((home / "lance").rglob("*"))
    for args in (
        ("status",),
        ("run",),
        ("send", "webchat", "hello again"),
        ("init",),
        ("doctor", "--repair-vectors"),
    ):
        _one_line(cortex(*args, home=home), f"{db_path} is missing", "to repair: cortex doctor --restore")
    assert not db_path.exists()
    assert {p: p.read_bytes() for p in kept} == kept and sorted((home / "lance").rglob("*")) == vectors
    assert not list((home / "inbox" / "webchat").glob("*.json"))
    assert _doctor_lines(cortex("doctor", home=home))["duckdb"].endswith(
        "is missing → cortex doctor --restore"
    )


def test_only_a_home_that_held_a_database_misses_it(tmp_path):
    paths = Paths(tmp_path)
    assert backup.lost(paths.db) is None  # a new home: the first command creates the file
    (paths.ingested / "webchat").mkdir(parents=True)
    (paths.ingested / "webchat" / "1.json").write_text("{}")
    lost = backup.lost(paths.db)
    assert lost.path == paths.db and lost.repair_command.startswith("cortex doctor --restore COPY")
    backup.folder(paths.db).mkdir()
    (backup.folder(paths.db) / "cortex-20260101T120000Z.duckdb").write_bytes(b"")
    assert backup.lost(paths.db).repair_command == "cortex doctor --restore"


def test_a_damaged_database_is_not_backed_up_over_the_good_backups(home):
    """The day's backup copied a file with a zeroed block (read commands still answered) and deleted
    the oldest good backup to make room for it."""
    db_path = Paths(home).db
    (today,) = backup.backups(db_path)
    for day in range(1, 8):
        shutil.copyfile(today, backup.folder(db_path) / f"cortex-202601{day:02d}T120000Z.duckdb")
    today.unlink()
    good = sorted(p.name for p in backup.backups(db_path))
    ((block, size),) = read_only(
        home,
        "SELECT min(block_id), any_value(block_size) "
        "FROM pragma_storage_info('outbox'), pragma_database_size() WHERE block_id >= 0",
    )
    with open(db_path, "r+b") as fh:  # a block recall does not read: the command still answers
        fh.seek(3 * 4096 + block * size)
        fh.write(b"\0" * 4096)

    recall = cortex("recall", "sister Porto", home=home)
    assert recall.returncode == 0 and "Porto" in recall.stdout, recall.stderr
    warning = recall.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("cortex: warning: the daily DuckDB backup failed: ")
    assert (
        "damaged block" in warning[0]
        and "no older backup was removed" in warning[0]
        and "cortex doctor" in warning[0]
    )
    assert sorted(p.name for p in backup.backups(db_path)) == good
    assert not list(backup.folder(db_path).glob(".*"))  # nor a temporary copy left behind


def _without_root_s_override(*args: str) -> list[str]:
    """argv that a chmod binds: root reads and writes any file unless it drops those capabilities."""
    if os.geteuid() != 0:
        return list(args)
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--", *args]


def _as_owner(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    argv = _without_root_s_override(sys.executable, "-m", "cortex_pipelines.cli", *args)
    return subprocess.run(argv, env=_env(home), capture_output=True, text=True, timeout=240)


def test_a_file_or_folder_this_user_may_not_write_is_a_chmod_line_not_a_restore(home):
    """An unreadable cortex.duckdb was reported as damaged with `cortex doctor --restore`, which
    crashed with a traceback; a read-only home crashed every write with a traceback; an unwritable
    outbox/<channel>/ went unsaid by `run` and doctor."""
    if subprocess.run(_without_root_s_override("true")).returncode != 0:
        pytest.skip("root cannot drop its file capabilities here")
    db_path, outbox = Paths(home).db, home / "outbox" / "webchat"
    db_path.chmod(0o000)
    try:
        for args in (("status",), ("doctor", "--restore")):
            line = _one_line(
                _as_owner(*args, home=home), f"{db_path} is not readable and writable by this user"
            )
            assert line.endswith(f"to repair: chmod u+rw {db_path}"), line
        assert _doctor_lines(_as_owner("doctor", home=home))["duckdb"].endswith(f"→ chmod u+rw {db_path}")
        assert not list(home.glob("cortex.duckdb.damaged-*"))
    finally:
        db_path.chmod(0o600)

    home.chmod(0o500)  # DuckDB writes its log beside the file
    try:
        pin = _as_owner("pin", "The spare key is under the blue pot.", home=home)
        _one_line(pin, f"{home} is not writable by this user", f"to repair: chmod u+rwx {home}")
    finally:
        home.chmod(0o700)

    outbox.chmod(0o500)
    try:
        status = _as_owner("status", home=home)
        assert status.returncode == 0 and status.stderr.strip() == (
            f"cortex: warning: {outbox} is not writable by this user: reply files wait unwritten; "
            f"to repair: chmod u+rwx {outbox}"
        )
        assert _doctor_lines(_as_owner("doctor", home=home))["outbox"].endswith(f"→ chmod u+rwx {outbox}")
    finally:
        outbox.chmod(0o700)


def test_restore_over_a_whole_database_asks_for_yes(home):
    """On a database that reads whole, a restore rolls back what was said since the backup: it
    did so unasked, and named the healthy file "damaged"."""
    cortex("send", "webchat", "A message newer than the backup.", home=home)
    cortex("run", home=home)
    before = json.loads(cortex("status", "--json", home=home).stdout)["bus"]
    _one_line(cortex("doctor", "--restore", home=home), "reads whole", "--yes")
    assert json.loads(cortex("status", "--json", home=home).stdout)["bus"] == before
    assert not list(home.glob("cortex.duckdb.damaged-*"))
    restored = cortex("doctor", "--restore", "--yes", home=home)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(cortex("status", "--json", home=home).stdout)["bus"]["completed"] < before["completed"]

    # It says what it rolled back and how to bring the messages back; the rolled-back reply's file
    # is set aside, not left for the next reply, which takes its id, to overwrite.
    ingested = home / "inbox" / ".ingested" / "webchat"
    assert (
        f"rolled back 1 message(s) and 1 reply(ies) from after the backup; `cortex ingest {ingested}` "
        "brings the messages back, to be answered again"
    ) in restored.stdout.splitlines()
    (aside,) = (home / "outbox").glob(".rolled-back-*")
    assert f"moved 1 outbox file(s) of rolled-back replies to {aside}" in restored.stdout.splitlines()
    assert [p.name for p in (aside / "webchat").iterdir()] == ["0000000003.json"]
    assert sorted(p.name for p in (home / "outbox" / "webchat").iterdir()) == [
        "0000000001.json",
        "0000000002.json",
    ]
    again = cortex("ingest", str(ingested), home=home)
    assert "ingested 1 message(s), 2 duplicate(s)" in again.stdout, again.stdout + again.stderr


def test_restore_over_a_database_from_a_newer_cortex_asks_for_yes(home):
    """A file a newer Cortex wrote reads whole and holds everything said since the backup: the
    restore rolled it back unasked because its schema was not this Cortex's."""
    cortex("send", "webchat", "A message newer than the backup.", home=home)
    cortex("run", home=home)
    con = duckdb.connect(str(Paths(home).db))
    con.execute("INSERT INTO schema_version VALUES (?, now())", [MIGRATIONS[-1][0] + 1])
    con.close()
    written = Paths(home).db.read_bytes()
    _one_line(cortex("doctor", "--restore", home=home), "reads whole", "--yes")
    assert Paths(home).db.read_bytes() == written
    assert not list(home.glob("cortex.duckdb.damaged-*"))


def test_restore_from_a_file_that_is_no_backup_says_so_and_nothing_about_the_healthy_database(home, tmp_path):
    """Its one line named the bad backup, then a second said the healthy database was "not a DuckDB
    file any more": following it would have rolled the database back."""
    fake = tmp_path / "not-a-backup.duckdb"
    fake.write_text("not a db")
    _one_line(cortex("doctor", "--restore", str(fake), "--yes", home=home), "not a readable backup")
    assert _doctor_lines(cortex("doctor", home=home))["duckdb"].startswith("ok")
    unknown = cortex("doctor", "--restore", "cortex-19990101T000000Z.duckdb", "--yes", home=home)
    _one_line(unknown, "no backup cortex-19990101T000000Z.duckdb")
    assert unknown.returncode == 2  # a name mistyped is bad input, as every command's is


def test_restore_refuses_while_another_process_holds_the_database(home):
    with held_by_another_process(Paths(home).db):
        proc = cortex("doctor", "--restore", home=home)
        _one_line(proc, "is open in another process")
    assert not list(home.glob("cortex.duckdb.damaged-*"))


def test_restore_refuses_while_a_run_is_answering(home):
    """A `cortex run` holds DuckDB only for short transactions, so the file lock let a restore swap
    the file under it: its reply was lost and the outbox files no longer matched their rows."""
    cortex("send", "webchat", "Remember that my bike is blue.", home=home)
    release = threading.Event()

    def answer_when_released(body):
        release.wait(60)
        return reply_text("Noted, your bike is blue.")

    with MessagesServer(responder=answer_when_released) as server:
        llm = {"CORTEX_LLM_PROVIDER": "anthropic", "CORTEX_BASE_URL": server.url, "CORTEX_API_KEY": "test"}
        run = subprocess.Popen(
            [sys.executable, "-m", "cortex_pipelines.cli", "run"],
            env=_env(home, llm),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not server.requests and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert server.requests, "the run never asked the model"
            proc = cortex("doctor", "--restore", "--yes", home=home)
        finally:
            release.set()
            out, errors = run.communicate(timeout=120)
    _one_line(proc, "is answering messages in this home", f"pid {run.pid}", "try again after it ends")
    assert not list(home.glob("cortex.duckdb.damaged-*"))
    assert run.returncode == 0, out + errors
    assert "Noted, your bike is blue." in (home / "outbox" / "webchat" / "0000000003.json").read_text()


def test_a_deleted_lancedb_fragment_degrades_recall_and_doctor_rebuilds_it(home):
    fragments = list((home / "lance" / "episodic.lance" / "data").iterdir())
    assert fragments
    fragments[0].unlink()
    # A saved recall snapshot of the same table version would still answer; a damaged one is
    # thrown away and the table read again, which meets the missing fragment.
    saved = next((home / "lance-snapshots" / "episodic").glob("v*"))
    (saved / "rows.arrow").write_bytes(b"not arrow")

    doctor = cortex("doctor", home=home)
    lines = _doctor_lines(doctor)
    assert doctor.returncode == 1
    assert (
        lines["lancedb episodic"].startswith("damaged")
        and "cortex doctor --repair-vectors" in lines["lancedb episodic"]
    )
    assert lines["recall snapshots"].startswith("damaged")
    assert lines["duckdb"].startswith("ok") and lines["lancedb semantic"].startswith("ok")

    recall = cortex("recall", "sister Porto", home=home)
    assert recall.returncode == 0 and "Porto" in recall.stdout
    warning = recall.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("cortex: warning: "), recall.stderr
    assert "episodic" in warning[0] and "cortex doctor --repair-vectors" in warning[0]

    # The brain's memory_query meets the damaged table too: the question is answered, not left in
    # `processing` (the run itself may fail later, when indexing writes to the damaged table).
    assert cortex("send", "webchat", QUESTION, home=home).returncode == 0
    cortex("run", home=home)
    state = json.loads(cortex("status", "--json", home=home).stdout)
    assert state["bus"]["completed"] == 3 and state["bus"]["processing"] == 0 and state["bus"]["failed"] == 0
    replies = json.loads(cortex("outbox", "--json", home=home).stdout)
    assert any("Porto" in r["text"] for r in replies if r["text"].startswith("Here's what I have"))

    repaired = cortex("doctor", "--repair-vectors", "--json", home=home)
    report = json.loads(repaired.stdout)
    assert repaired.returncode == 0 and report["ok"], repaired.stdout
    assert {s["store"] for s in report["stores"]} >= {
        "duckdb",
        "lancedb episodic",
        "recall snapshots",
        "disk",
    }
    recall = cortex("recall", "sister Porto", home=home)
    assert recall.returncode == 0 and "Porto" in recall.stdout and recall.stderr == ""


def test_a_full_disk_is_one_line_and_queues_nothing(home, tmp_path):
    """Every write that flushes its data (here the inbox file `send` writes) meets ENOSPC."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        textwrap.dedent(
            """
            import os

            def disk_full(fd):
                raise OSError(28, "No space left on device")

            os.fsync = disk_full
            """
        )
    )
    proc = cortex("send", "webchat", "Remember the dentist.", home=home, env={"PYTHONPATH": str(inject)})
    _one_line(proc, "disk", str(home), "is full", "free some space")
    assert not [p for p in (home / "inbox").rglob("*") if p.is_file() and "dentist" in p.read_text()]


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        duckdb.IOException('IO Error: Could not write file "x.wal": No space left on device'),
        RuntimeError("lance error: IO error: failed to write: No space left on device (os error 28)"),
        sqlite3.OperationalError("database or disk is full"),  # Dagster's run storage
    ],
    ids=["oserror", "duckdb", "lance", "sqlite"],
)
def test_every_storage_library_s_full_disk_maps_to_the_same_line(exc, tmp_path):
    wrapped = RuntimeError("the asset failed")
    wrapped.__cause__ = exc
    damage = as_store_damaged(wrapped, Paths(tmp_path))
    assert damage is not None and damage.store == "the disk holding" and damage.path == tmp_path
    assert "\n" not in str(damage)


def test_lance_and_duckdb_damage_name_their_store(tmp_path):
    paths = Paths(tmp_path)
    lance = as_store_damaged(
        RuntimeError(
            "lance error: Not found: x/lance/semantic.lance/data/0a.lance, /root/.cargo/a/local.rs:273:40"
        ),
        paths,
    )
    assert (
        lance.path == paths.lance / "semantic.lance"
        and lance.repair_command == "cortex doctor --repair-vectors"
    )
    assert ".rs:" not in str(lance)
    corrupt = as_store_damaged(
        duckdb.Error("Corrupt database file: computed checksum 1 does not match"), paths
    )
    assert corrupt.path == paths.db and corrupt.repair_command == "cortex doctor --restore"
    assert as_store_damaged(ValueError("an ordinary bug"), paths) is None


def test_backups_before_a_migration_and_daily_keep_the_newest_user_only(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    path = home / "cortex.duckdb"
    con = duckdb.connect(str(path))  # a database as version 1 of Cortex left it
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
    for statement in MIGRATIONS[0][1]:
        con.execute(statement)
    con.execute("INSERT INTO schema_version VALUES (1, now())")
    con.close()

    init_home(load_settings(home))
    latest = MIGRATIONS[-1][0]
    (before_migration,) = backup.backups(path)
    assert before_migration.name.endswith(f"-pre-v{latest}.duckdb")
    assert backup.verify(before_migration) == 1  # the schema as it was
    assert Database(path).schema_version() == latest
    assert stat.S_IMODE(before_migration.stat().st_mode) == 0o600
    assert stat.S_IMODE(backup.folder(path).stat().st_mode) == 0o700

    # Older days' backups: the day's first process takes one and keeps the newest backup_keep.
    for day in range(1, 10):
        shutil.copyfile(before_migration, backup.folder(path) / f"cortex-202601{day:02d}T120000Z.duckdb")
    before_migration.unlink()
    monkeypatch.setenv("CORTEX_BACKUP_KEEP", "3")
    monkeypatch.setattr(db_module, "_migrated", set())
    Database(path).migrate()
    kept = backup.backups(path)
    assert len(kept) == 3 and not backup.due(path)
    assert [p.name for p in kept[1:]] == ["cortex-20260109T120000Z.duckdb", "cortex-20260108T120000Z.duckdb"]
    assert backup.verify(kept[0]) == latest


def test_doctor_names_the_embedding_model_and_a_model_folder_that_lost_its_weights(home, tmp_path):
    """A model folder whose weights were deleted passed the start-up check; then every indexing run
    failed its memory steps, and doctor said every store was fine."""
    healthy = _doctor_lines(cortex("doctor", home=home))
    assert healthy["embeddings"].startswith("ok       all-MiniLM-L6-v2, 384 dims, query encoder")

    from cortex_pipelines.memory.embedder import resolve_model_path

    folder = tmp_path / "minilm"
    shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), folder)
    (folder / "model.safetensors").unlink()
    doctor = cortex("doctor", home=home, env={"CORTEX_EMBEDDING_MODEL": str(folder)})
    assert doctor.returncode == 1
    assert (
        _doctor_lines(doctor)["embeddings"] == f"damaged  no weights in {folder} → put the model's files back"
    )
    assert _doctor_lines(doctor)["duckdb"].startswith("ok")
