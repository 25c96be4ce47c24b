"""The inbox folder protocol: $CORTEX_HOME/inbox/<channel>/*.json|*.jsonl.

A file leaves the inbox only after its rows are committed (crash in between: the next scan
re-inserts idempotently and then moves it). A bad file goes to inbox/.rejected/ with a one-line
`.error` note; the rest of the batch still lands. Symlinks and other non-regular files are never
followed, so nothing outside CORTEX_HOME is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cortex_pipelines import clock
from cortex_pipelines.config import Settings
from cortex_pipelines.files import write_atomic
from cortex_pipelines.ingest.envelope import EnvelopeError, validate
from cortex_pipelines.storage import Database
from cortex_pipelines.storage.bus import enqueue_rows
from cortex_pipelines.storage.session import import_history

SUFFIXES = (".json", ".jsonl")
_SETTLE_S = 2.0  # a file this fresh that fails to parse may still be being written


class UnparsableFile(EnvelopeError):
    """Not valid JSON: possibly a file a naive connector is still writing."""


@dataclass
class FileOutcome:
    path: Path
    accepted: int = 0
    duplicates: int = 0
    error: str | None = None
    deferred: bool = False


@dataclass
class IngestReport:
    files: list[FileOutcome] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return sum(f.accepted for f in self.files)

    @property
    def duplicates(self) -> int:
        return sum(f.duplicates for f in self.files)

    @property
    def rejected(self) -> list[FileOutcome]:
        return [f for f in self.files if f.error and not f.deferred]


def _decode_values(path: Path, data: bytes) -> list[object]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvelopeError(f"not valid UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise EnvelopeError("file is empty")
    try:
        if path.suffix == ".jsonl":
            values = []
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        values.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise UnparsableFile(f"line {n}: invalid JSON: {exc.msg}") from None
            return values
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise UnparsableFile(f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise EnvelopeError("JSON nested too deeply") from None


def read_file(path: Path, settings: Settings, folder_channel: str | None) -> list[dict]:
    """Validate a whole file into bus rows; any bad message rejects the file (all or nothing)."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise EnvelopeError("not a regular file (symlinks are never followed)")
    if info.st_size > settings.max_file_bytes:
        raise EnvelopeError(f"file is {info.st_size} bytes, over the {settings.max_file_bytes}-byte limit")
    if path.suffix not in SUFFIXES:
        raise EnvelopeError(f"unsupported file type {path.suffix!r} (use .json or .jsonl)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(settings.max_file_bytes + 1)
    now = clock.now()
    rows = []
    for n, value in enumerate(_decode_values(path, data), 1):
        try:
            rows.append(validate(value, settings, now, folder_channel))
        except EnvelopeError as exc:
            where = f"message {n}: " if path.suffix == ".jsonl" else ""
            raise EnvelopeError(f"{where}{exc}") from None
    return rows


def _unique_destination(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / name
    if not dest.exists() and not dest.is_symlink():
        return dest
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return folder / f"{stamp}-{name}"


def _reject(path: Path, reason: str, settings: Settings, channel_folder: str) -> None:
    dest = _unique_destination(settings.paths.rejected / channel_folder, path.name)
    note = dest.with_name(dest.name + ".error")
    # The note first: a crash before the move leaves the file in the inbox to be rejected again,
    # never a rejected file without its reason.
    write_atomic(note, reason.replace("\n", " ") + "\n")
    try:
        os.rename(path, dest)  # renames a symlink itself, never its target
    except FileNotFoundError:  # another ingester got there first
        if not dest.exists() and not dest.is_symlink():
            note.unlink(missing_ok=True)


def _archive(path: Path, settings: Settings, channel: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, _unique_destination(settings.paths.ingested / channel, path.name))


def _candidates(inbox: Path) -> list[tuple[Path, str]]:
    """Files waiting in the inbox, oldest first, paired with their channel folder name."""
    found: list[tuple[float, str, Path, str]] = []
    if not inbox.is_dir():
        return []
    for entry in os.scandir(inbox):
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False):
            for item in os.scandir(entry.path):
                if item.name.startswith(".") or item.name.endswith((".tmp", ".part")):
                    continue
                if item.is_dir(follow_symlinks=False):
                    continue
                mtime = item.stat(follow_symlinks=False).st_mtime
                found.append((mtime, item.name, Path(item.path), entry.name))
        else:
            mtime = entry.stat(follow_symlinks=False).st_mtime
            found.append((mtime, entry.name, Path(entry.path), ""))
    found.sort(key=lambda f: (f[0], f[1]))
    return [(path, channel) for _, _, path, channel in found]


def ingest_inbox(settings: Settings, db: Database) -> IngestReport:
    """One pass over the inbox: validate every file, insert all good rows in one transaction
    (idempotently, in file order), then archive the good files and reject the bad ones."""
    report = IngestReport()
    accepted: list[tuple[FileOutcome, str, str, int]] = []  # outcome, folder, source, rows
    rows: list[dict] = []
    for path, folder in _candidates(settings.paths.inbox):
        outcome = FileOutcome(path)
        report.files.append(outcome)
        try:
            if not folder:
                raise EnvelopeError("files belong in inbox/<channel>/, not the inbox root")
            file_rows = read_file(path, settings, folder_channel=folder)
        except EnvelopeError as exc:
            outcome.error = str(exc)
            try:
                fresh = time.time() - os.lstat(path).st_mtime < _SETTLE_S
            except FileNotFoundError:
                continue
            if fresh and isinstance(exc, UnparsableFile):
                outcome.deferred = True  # probably still being written; look again next pass
                continue
            _reject(path, outcome.error, settings, folder or "_root")
            continue
        except OSError as exc:
            outcome.error = f"unreadable: {exc.strerror or exc}"
            _reject(path, outcome.error, settings, folder or "_root")
            continue
        source = f"inbox/{folder}/{path.name}"
        rows += [{**row, "source": source} for row in file_rows]
        accepted.append((outcome, folder, source, len(file_rows)))
    if not accepted:
        return report
    result = db.run(enqueue_rows, rows, "inbox")
    for outcome, folder, source, count in accepted:  # only after the commit
        outcome.accepted = result.inserted_by_source.get(source, 0)
        outcome.duplicates = count - outcome.accepted
        _archive(outcome.path, settings, folder)
    return report


def ingest_path(path: Path, settings: Settings, db: Database, history: bool = False) -> IngestReport:
    """Bulk import a .json/.jsonl file or a folder of them; the source files are left in place.

    With history=True the messages become past conversation: stored in the session and indexed,
    never answered.
    """
    report = IngestReport()
    files = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES) if path.is_dir() else [path]
    for file in files:
        outcome = FileOutcome(file)
        report.files.append(outcome)
        try:
            rows = read_file(file, settings, folder_channel=None)
        except EnvelopeError as exc:
            outcome.error = str(exc)
            continue
        except OSError as exc:
            outcome.error = f"unreadable: {exc.strerror or exc}"
            continue
        if history:
            result = db.run(import_history, rows, f"import:{file.name}")
        else:
            result = db.run(enqueue_rows, rows, f"import:{file.name}")
        outcome.accepted, outcome.duplicates = len(result.inserted), result.duplicates
    return report
