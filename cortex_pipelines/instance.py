"""Setting up and inspecting one CORTEX_HOME, shared by the CLI and the tests."""

from __future__ import annotations

import fcntl
import os
import time
from importlib import resources
from pathlib import Path
from typing import IO

import tomlkit  # edits config.toml without losing comments

from cortex_pipelines import delivery
from cortex_pipelines.config import ADMIN_CHANNEL, ANY_CHANNEL, Paths, Settings
from cortex_pipelines.connectors.states import live_states
from cortex_pipelines.files import write_atomic
from cortex_pipelines.ingest.inbox import rejected_files
from cortex_pipelines.llm import cost
from cortex_pipelines.proactive import schedules, supervision
from cortex_pipelines.storage import Database, bus, conversations, usage
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage.facts import tier_counts
from cortex_pipelines.storage.published import BULLETIN, published_row
from cortex_pipelines.storage.session import pins

WORKSPACE_YAML = """# Written by `cortex init`; `cortex dev` points the Dagster UI at it.
load_from:
  - python_module: cortex_pipelines.definitions
"""


def init_home(settings: Settings) -> list[Path]:
    """Migrate the database, create the folders, install dagster.yaml. Safe to run again. The
    database comes first: a home whose database is missing fails there, with nothing created."""
    paths = settings.paths
    Database(paths.db).migrate()
    for folder in (paths.inbox, paths.rejected, paths.outbox, paths.out, paths.dagster_home, paths.workspace):
        folder.mkdir(parents=True, exist_ok=True)
    written = []
    shipped = resources.files("cortex_pipelines").joinpath("dagster.yaml").read_text()
    for target, body in (
        (paths.dagster_yaml, shipped),
        (paths.dagster_workspace, WORKSPACE_YAML),
    ):
        if not target.exists() or target.read_text() != body:
            write_atomic(target, body)
            written.append(target)
    return written


def check_owner_channels(settings: Settings, owners: dict[str, list[str]]) -> None:
    """ValueError unless each channel is one messages can arrive on, or '*': a typo ("webcaht") made
    the real owner a stranger there. `admin` takes none: everything said on it is the owner's."""
    known = settings.known_channels() - {ADMIN_CHANNEL}
    for channel in owners:
        if channel == ADMIN_CHANNEL:
            raise ValueError(
                f"{ADMIN_CHANNEL!r} takes no owners: it is the owner's terminal (`cortex chat`), "
                "where everything said is theirs"
            )
        if channel != ANY_CHANNEL and channel not in known:
            raise ValueError(
                f"unknown channel {channel!r}{settings.channel_hint(channel)}; known: "
                f"{', '.join(sorted(known))}, or '*' for every channel (add it to CORTEX_CHANNELS or "
                "CORTEX_CHANNEL_MODES)"
            )


def add_owners(settings: Settings, owners: dict[str, list[str]]) -> list[str]:
    """Add owner sender ids to config.toml, keeping its other settings and comments; an id already
    there is left alone, so running it again changes nothing. Returns the CHANNEL:ID pairs added.
    A new entry is a top-level `owners = {...}` line, not an `[owners]` table, which would swallow a
    setting appended below it; a table written by an older version is extended in place."""
    check_owner_channels(settings, owners)
    path = settings.paths.config_file
    config = tomlkit.parse(path.read_text(encoding="utf-8-sig")) if path.is_file() else tomlkit.document()
    if "owners" not in config:
        config["owners"] = tomlkit.inline_table()  # tomlkit puts it above the first table
    table = config["owners"]
    added = []
    for channel, senders in owners.items():
        current = table.setdefault(channel, tomlkit.array())
        for sender in senders:
            if sender not in current:
                current.append(sender)
                added.append(f"{channel}:{sender}")
    if added:
        write_atomic(path, tomlkit.dumps(config))
    return added


def dagster_env(settings: Settings) -> dict[str, str]:
    """Environment for Dagster processes of this instance: its DAGSTER_HOME and CORTEX_HOME."""
    return {**os.environ, "DAGSTER_HOME": str(settings.paths.dagster_home), "CORTEX_HOME": str(settings.home)}


class DevRunning(Exception):
    """Another `cortex dev` runs on this home: its pid and UI, as "pid 123, UI http://..."."""


_CLAIM_WAIT_S = 1.0  # `live_dev` holds the lock for a moment; a live `cortex dev` holds it for good


def dev_lock(paths: Paths) -> Path:
    return paths.dagster_home / "cortex-dev.lock"


def claim_dev(paths: Paths, url: str) -> IO[str]:
    """Claim this home for this process's `cortex dev` (its UI at `url`), or raise DevRunning. A
    second one started its own daemon on the same Dagster instance (two sensor loops over one DuckDB
    file) and, stopping, wiped the live one's daemon reports, which `cortex doctor --restore` reads.
    Returns the lock file: the claim lasts while it is open, that is, until this process ends, even
    by SIGKILL (the kernel drops an flock with the last descriptor; children inherit none)."""
    path = dev_lock(paths)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+", encoding="utf-8")
    deadline = time.monotonic() + _CLAIM_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                raise DevRunning(live_dev(paths) or "pid unknown") from None
            time.sleep(0.05)
    lock.truncate(0)
    lock.write(f"{os.getpid()} {url}\n")
    lock.flush()
    return lock


def live_dev(paths: Paths) -> str | None:
    """The `cortex dev` running on this home now, as "pid 123, UI http://...", or None."""
    path = dev_lock(paths)
    try:
        lock = path.open(encoding="utf-8")
    except FileNotFoundError:
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # for a moment: no one holds it
            return None
        except BlockingIOError:
            pass
        deadline = time.monotonic() + _CLAIM_WAIT_S
        while not (said := lock.read().split()) and time.monotonic() < deadline:
            time.sleep(0.05)  # claimed a moment ago: its pid is on its way
            lock.seek(0)
    return f"pid {said[0]}, UI {said[1]}" if len(said) == 2 else "pid unknown"


def dev_state(paths: Paths) -> dict:
    """Whether a `cortex dev` serves this home ("pid 123, UI http://..."), and, when none does, the
    processes a killed one left running (its webserver on the UI's port, its daemon still ticking
    sensors): its watcher ends them as it ends, unless it was killed too; then the next `cortex
    dev` here does, and until then only this says they are there."""
    from cortex_pipelines.processes import left_by_earlier_dev

    running = live_dev(paths)
    left = [] if running else left_by_earlier_dev(paths.dagster_home)
    return {"running": running, "left_behind": [{"pid": p.pid, "program": name} for p, name in left]}


def status(settings: Settings) -> dict:
    """What `cortex status` shows. Its readers are imported here: the command line imports this
    module for every command, and LanceDB's reader alone loads numpy and pyarrow."""
    from cortex_pipelines.memory.vectors import EPISODIC, vector_store
    from cortex_pipelines.storage.dagster_sqlite import history_size

    db = Database(settings.paths.db)
    talked = db.run(conversations.counts)
    seen = set(talked["by_channel"]) | set(db.run(bus.channels))
    channels = sorted(seen | set(settings.channel_modes))
    tiers = db.run(tier_counts)
    warm = db.run(published_row, BULLETIN)
    vectors = vector_store(settings.paths.lance)
    made = vectors.embedded_by(EPISODIC)
    return {
        "home": str(settings.home),
        "bus": db.run(bus.counts),
        "inbox_rejected": rejected_files(settings.paths),
        "channels": {name: settings.mode_for(name) for name in channels},
        "conversations": talked,
        "outbox": delivery.counts(db, settings),
        "dev": dev_state(settings.paths),
        "connectors": live_states(settings.paths),  # of a gateway running now
        "memory": {
            "hot": tiers["hot"],
            "cold": tiers["cold"],
            "episodic": vectors.count(EPISODIC),
            "pinned": len(db.run(pins)),
            "embedding_model": settings.embedding_model,
            # Another model's name until the next indexing run re-embeds every turn with this one.
            "episodes_embedded_by": made[0] if made else None,
        },
        "llm": {"provider": settings.llm_provider, **db.run(usage.totals), **cost.status(db, settings)},
        "warmup": warm["state"] if warm else "cold",
        "cold_dispatches": warm["cold_dispatches"] if warm else 0,
        "schedules": db.run(schedules.summary),
        "ops": db.run(ops_store.counts),
        "supervision": db.run(supervision.status),
        "outputs": {name: str(path) for name, path in _outputs(settings).items() if path.is_file()},
        # Dagster's run history on disk; finished runs older than keep_days go (0: none do).
        "run_history": {
            **history_size(settings.paths.dagster_home),
            "keep_days": settings.run_history_days,
        },
    }


def _outputs(settings: Settings) -> dict[str, Path]:
    """Every file in out/: the publish assets' and compaction's hot snapshot."""
    return {**settings.paths.published, "hot_snapshot": settings.paths.hot_snapshot}
