"""The inbox folder protocol: $CORTEX_HOME/inbox/<channel>/*.json|*.jsonl.

A file leaves the inbox only after its rows are committed (crash in between: the next scan
re-inserts idempotently and then moves it). A bad file goes to inbox/.rejected/ with a one-line
`.error` note; the rest of the batch still lands. Symlinks and other non-regular files are never
followed, and a file with other hard links is refused, so nothing outside CORTEX_HOME is read.

Every entry of a pass is ingested, rejected with a note, or reported as deferred; no entry can
stop the others (an entry that cannot even be moved aside is reported and retried next pass):
- a folder inside a channel folder is moved to .rejected/ whole, unread (subfolders are not read);
- a writer's temporary name (starting with "." or ending ".tmp"/".part", or anything under a
  dot-named folder of the inbox root other than .rejected/.ingested) is deferred while it changes
  and rejected once untouched for _ABANDONED_S: the writer never renamed it;
- a fresh file that does not parse, or a fresh hard link (a writer between link and unlink), is
  deferred for _SETTLE_S;
- a file whose rows are in but that changed since it was read, or that another process still has
  open for writing (a connector appending in place), stays: archived, its later lines would go
  into .ingested unread. The next pass reads it again; the lines already in are duplicates;
- stored names stay within NAME_MAX bytes: a longer one keeps its start, a hash of the whole
  name and its suffix.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import signal
import stat
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cortex_pipelines import clock
from cortex_pipelines.config import Paths, Settings
from cortex_pipelines.files import NAME_MAX, write_atomic
from cortex_pipelines.ingest.envelope import EnvelopeError, validate
from cortex_pipelines.storage import Database
from cortex_pipelines.storage.bus import enqueue_one, enqueue_rows, ring_doorbell
from cortex_pipelines.storage.session import import_history

SUFFIXES = (".json", ".jsonl")
_SETTLE_S = 2.0  # a file this fresh that fails to parse may still be being written
_ABANDONED_S = 600.0  # a temporary name untouched this long was left behind by its writer
_INTERNAL = (".rejected", ".ingested")
_NOTE = ".error"
_ROOM = NAME_MAX - len(_NOTE)  # a stored name leaves room for its note's suffix


class Unsettled(EnvelopeError):
    """Possibly a file a writer is still busy with: deferred while fresh, rejected after."""


class UnparsableFile(Unsettled):
    """Not valid JSON: possibly a file a naive connector is still writing."""


class Deferred(Exception):
    """Not this pass; str() says why, for the report. `settles_at`: for a fresh file that does not
    parse, when (time.time()) it stops being taken for one still being written."""

    def __init__(self, why: str, settles_at: float | None = None):
        super().__init__(why)
        self.settles_at = settles_at


@dataclass
class FileOutcome:
    path: Path
    accepted: int = 0
    duplicates: int = 0
    error: str | None = None  # why it was rejected, or with `deferred`, why it waits
    deferred: bool = False
    settles_at: float | None = None  # deferred as still being written until then (Deferred)


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

    @property
    def deferred(self) -> list[FileOutcome]:
        return [f for f in self.files if f.deferred]


def printable(text: str) -> str:
    """A file name as one printable line: undecodable bytes and control characters escaped.
    Names come from whoever writes to the inbox; DuckDB and logs refuse undecodable ones."""
    raw = os.fsencode(text).decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in raw)


def _one_value_per_key(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object naming a key twice is refused: json.loads keeps the last value, a proxy or filter
    in front of the gateway may have checked the first ("sender": "owner" then "sender": "eve")."""
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise EnvelopeError(f"key {key[:40]!a} appears twice in one object")
        found[key] = value
    return found


def _loads(text: str) -> object:
    """json.loads, strict about repeated keys; its refusal of a very long integer is a plain
    ValueError, which no caller expects."""
    try:
        return json.loads(text, object_pairs_hook=_one_value_per_key)
    except (json.JSONDecodeError, EnvelopeError):
        raise
    except ValueError:
        raise EnvelopeError(f"a JSON number over {sys.get_int_max_str_digits()} digits") from None


def decode_values(data: bytes, jsonl: bool) -> list[object]:
    """The JSON values of a file or request body: one, or one per line of a .jsonl."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvelopeError(f"not valid UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise EnvelopeError("file is empty")
    try:
        if jsonl:
            values = []
            # Only "\n" ends a line: U+2028, \x85 and the like are valid inside a JSON string.
            for n, line in enumerate(text.split("\n"), 1):
                if line.strip():
                    try:
                        values.append(_loads(line))
                    except json.JSONDecodeError as exc:
                        raise UnparsableFile(f"line {n}: invalid JSON: {exc.msg}") from None
                    except EnvelopeError as exc:
                        raise EnvelopeError(f"line {n}: {exc}") from None
            return values
        try:
            return [_loads(text)]
        except json.JSONDecodeError as exc:
            raise UnparsableFile(f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise EnvelopeError("JSON nested too deeply") from None


def _check_file(info: os.stat_result, settings: Settings, single_link: bool) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise EnvelopeError("not a regular file (symlinks are never followed)")
    if single_link and info.st_nlink > 1:
        raise Unsettled(
            f"a hard link ({info.st_nlink} names): hard links are not accepted, "
            "so no file outside the inbox is read through one"
        )
    if info.st_size > settings.max_file_bytes:
        raise EnvelopeError(f"file is {info.st_size} bytes, over the {settings.max_file_bytes}-byte limit")


_Version = tuple[int, int, int, int]  # device, inode, size, mtime (ns): what was read


def _version(info: os.stat_result) -> _Version:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def read_file(
    path: Path, settings: Settings, folder_channel: str | None, single_link: bool = False
) -> list[dict]:
    """Validate a whole file into bus rows; any bad message rejects the file (all or nothing).

    single_link (the inbox) refuses a file with other hard links: its other name may be anywhere.
    The checks are repeated on the opened file, which may have been swapped since the lstat."""
    return _read_version(path, settings, folder_channel, single_link)[0]


def _read_version(
    path: Path, settings: Settings, folder_channel: str | None, single_link: bool
) -> tuple[list[dict], _Version]:
    """read_file, with the version of the file the rows came from."""
    _check_file(os.lstat(path), settings, single_link)  # never opens a FIFO or a device
    if path.suffix not in SUFFIXES:
        raise EnvelopeError(f"unsupported file type {path.suffix!r} (use .json or .jsonl)")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        _check_file(info, settings, single_link)
        data = fh.read(settings.max_file_bytes + 1)
    # The size read, with the mtime from before reading: a write during the read changes either.
    version = (info.st_dev, info.st_ino, len(data), info.st_mtime_ns)
    now = clock.now()
    rows = []
    for n, value in enumerate(decode_values(data, path.suffix == ".jsonl"), 1):
        try:
            rows.append(validate(value, settings, now, folder_channel))
        except EnvelopeError as exc:
            where = f"message {n}: " if path.suffix == ".jsonl" else ""
            raise EnvelopeError(f"{where}{exc}") from None
    return rows, version


def _fit(name: str, room: int) -> str:
    """`name` if it fits in `room` bytes, else its start, a hash of the whole name and its suffix."""
    raw = os.fsencode(name)
    if len(raw) <= room:
        return name
    suffix = Path(name).suffix
    if len(os.fsencode(suffix)) > 16:
        suffix = ""
    tag = "~" + hashlib.sha256(raw).hexdigest()[:16]
    keep = room - len(tag) - len(os.fsencode(suffix))
    return raw[:keep].decode("utf-8", "ignore") + tag + suffix


def _unique_destination(folder: Path, name: str) -> Path:
    """A free name in `folder` with room for a `.error` note beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / _fit(name, _ROOM)
    if not os.path.lexists(dest):
        return dest
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return folder / _fit(f"{stamp}-{name}", _ROOM)


def _reject(path: Path, reason: str, settings: Settings, channel_folder: str) -> bool:
    """Move `path` (a file or a whole folder) to .rejected/ beside its note; False if it was gone."""
    dest = _unique_destination(settings.paths.rejected / channel_folder, path.name)
    note = dest.with_name(dest.name + _NOTE)
    # The note first: a crash before the move leaves the file in the inbox to be rejected again,
    # never a rejected file without its reason.
    write_atomic(note, reason.replace("\n", " ") + "\n")
    try:
        os.rename(path, dest)  # renames a symlink itself, never its target
    except FileNotFoundError:  # another ingester got there first
        if not os.path.lexists(dest):
            note.unlink(missing_ok=True)
        return False
    except OSError:
        note.unlink(missing_ok=True)
        raise
    return True


def _open_for_writing(path: Path) -> bool:
    """Whether another process holds the file open for writing, as a connector appending to a
    .jsonl in place does: archived now, its later lines would go into the archived file unread.
    Linux refuses a read lease on such a file; where leases are not available (another system or
    file system, a file someone else owns) this says False and the version check alone remains."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False  # gone or unreadable: archiving will say
    try:
        # A writer opening the file while we hold the lease signals us: SIGURG, ignored by
        # default, rather than SIGIO, which would kill this process.
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except (AttributeError, OSError) as exc:
        return getattr(exc, "errno", None) == errno.EAGAIN
    finally:
        os.close(fd)  # releases the lease
    return False


def _still_written(path: Path, version: _Version) -> str | None:
    """Why a file whose rows are in must stay in the inbox a pass longer, or None. Its next read
    adds only what was appended since: the lines already in are duplicates."""
    try:
        if _version(os.lstat(path)) != version:
            return "it changed while it was read"
    except FileNotFoundError:
        return None
    if _open_for_writing(path):
        return "a writer still has it open"
    return None


def _archive(path: Path, settings: Settings, channel: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, _unique_destination(settings.paths.ingested / channel, path.name))


def _fresh(info: os.stat_result, seconds: float) -> bool:
    """Modified in the last `seconds`. An mtime far in the future counts as old, so a wrong clock
    cannot hold an entry back forever."""
    return -_ABANDONED_S < time.time() - info.st_mtime < seconds


def unfinished(name: str, folder: str) -> bool:
    """A writer's name for what it has not finished (README: write, then rename)."""
    return name.startswith(".") or name.endswith((".tmp", ".part")) or folder.startswith(".")


def _read_entry(path: Path, folder: str, settings: Settings) -> tuple[list[dict], _Version]:
    """The bus rows of one inbox entry and the version they came from. Raises Deferred to look
    again next pass, EnvelopeError or OSError to reject it, FileNotFoundError when it is gone."""
    info = os.lstat(path)
    if unfinished(path.name, folder):
        if _fresh(info, _ABANDONED_S):
            raise Deferred(
                "a temporary name, waiting for its writer to rename it "
                f"(rejected once untouched for {_ABANDONED_S:.0f} s)"
            )
        raise EnvelopeError(f"a temporary name untouched for {_ABANDONED_S:.0f} s: its writer left it")
    if stat.S_ISDIR(info.st_mode):
        raise EnvelopeError("a folder: messages go in files directly in inbox/<channel>/, not in subfolders")
    if not folder:
        raise EnvelopeError("files belong in inbox/<channel>/, not the inbox root")
    try:
        return _read_version(path, settings, folder_channel=folder, single_link=True)
    except Unsettled as exc:
        info = os.lstat(path)
        if _fresh(info, _SETTLE_S):
            raise Deferred(f"still being written ({exc})", info.st_mtime + _SETTLE_S) from None
        raise


_Found = tuple[os.stat_result, str, Path, str]  # lstat, name, path, channel folder ("" at the root)


def _scan(folder: Path, channel: str, found: list[_Found], unlisted: list[FileOutcome]) -> None:
    """Add the entries of `folder` to `found`; one that cannot be listed is reported, not fatal."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not channel and entry.name in _INTERNAL:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    found.append((entry.stat(follow_symlinks=False), entry.name, Path(entry.path), channel))
    except FileNotFoundError:
        return
    except OSError as exc:
        unlisted.append(FileOutcome(folder, error=f"cannot be listed: {exc.strerror or exc}", deferred=True))


def _candidates(inbox: Path) -> tuple[list[tuple[Path, str]], list[FileOutcome]]:
    """Entries waiting in the inbox, oldest first, each paired with its channel folder name ("" at
    the inbox root); and the folders that could not be listed, reported as deferred."""
    if not inbox.is_dir():
        return [], []
    top: list[_Found] = []
    unlisted: list[FileOutcome] = []
    _scan(inbox, "", top, unlisted)
    found: list[_Found] = []
    for found_at_root in top:
        info, name, path, _ = found_at_root
        if stat.S_ISDIR(info.st_mode):
            _scan(path, name, found, unlisted)
        else:
            found.append(found_at_root)
    found.sort(key=lambda f: (f[0].st_mtime, f[1]))
    return [(path, channel) for _, _, path, channel in found], unlisted


def _reject_or_defer(outcome: FileOutcome, reason: str, settings: Settings, folder: str) -> bool:
    """Reject the entry; when even that fails, report it as deferred. False if it was gone."""
    outcome.error = reason
    try:
        return _reject(outcome.path, reason, settings, folder or "_root")
    except OSError as exc:
        outcome.deferred = True
        outcome.error = f"could not be moved to .rejected ({exc.strerror or exc}): {reason}"
        return True


def ingest_inbox(settings: Settings, db: Database, only: frozenset[Path] | None = None) -> IngestReport:
    """One pass over the inbox (or over the entries `only` names): validate every file, insert all
    good rows in one transaction (idempotently, in file order), then archive the good files and
    reject the bad ones."""
    entries, unlisted = _candidates(settings.paths.inbox)
    if only is not None:
        entries, unlisted = [e for e in entries if e[0] in only], []
    report = IngestReport(unlisted)
    accepted: list[tuple[FileOutcome, str, str, int, _Version]] = []  # outcome, folder, source, rows, version
    rows: list[dict] = []
    for path, folder in entries:
        outcome = FileOutcome(path)
        try:
            file_rows, version = _read_entry(path, folder, settings)
        except FileNotFoundError:
            continue  # gone: taken by another ingester, or renamed by its writer
        except Deferred as exc:
            outcome.deferred, outcome.error, outcome.settles_at = True, str(exc), exc.settles_at
        except EnvelopeError as exc:
            if not _reject_or_defer(outcome, str(exc), settings, folder):
                continue
        except OSError as exc:
            if not _reject_or_defer(outcome, f"unreadable: {exc.strerror or exc}", settings, folder):
                continue
        else:
            source = f"inbox/{printable(folder)}/{printable(path.name)}"
            rows += [{**row, "source": source} for row in file_rows]
            accepted.append((outcome, folder, source, len(file_rows), version))
        report.files.append(outcome)
    if not accepted:
        return report
    result = db.run(enqueue_rows, rows, "inbox")
    for outcome, folder, source, count, version in accepted:  # only after the commit
        outcome.accepted = result.inserted_by_source.get(source, 0)
        outcome.duplicates = count - outcome.accepted
        if why := _still_written(outcome.path, version):
            outcome.deferred = True
            outcome.error = f"ingested, but left for the next pass: {why}"
            continue
        try:
            _archive(outcome.path, settings, folder)
        except OSError as exc:  # its rows are in: the next pass finds them duplicates and retries
            outcome.deferred = True
            outcome.error = f"ingested, but not moved to .ingested yet ({exc.strerror or exc})"
    return report


def ingest_settled(settings: Settings, db: Database) -> IngestReport:
    """ingest_inbox for a one-off caller (`cortex run`), which reports what became of each file: a
    fresh file that does not parse is read again once it has settled (within _SETTLE_S). Reported
    as deferred, it was rejected unreported by the pass of the run that followed seconds later."""
    first = ingest_inbox(settings, db)
    now = time.time()
    # Not one dated ahead (a skewed clock): it would still be fresh when looked at again.
    unsettled = [f for f in first.files if f.settles_at is not None and f.settles_at - now <= _SETTLE_S]
    if not unsettled:
        return first
    time.sleep(max(max(f.settles_at for f in unsettled) - now, 0.0) + 0.05)
    again = ingest_inbox(settings, db, frozenset(f.path for f in unsettled))
    return IngestReport([f for f in first.files if f not in unsettled] + again.files)


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
            result = db.run(import_history, rows, f"import:{printable(file.name)}")
        else:
            result = db.run(enqueue_rows, rows, f"import:{printable(file.name)}")
        outcome.accepted, outcome.duplicates = len(result.inserted), result.duplicates
    return report


def rejected_files(paths: Paths) -> int:
    """Inbox entries set aside as bad, each with its one-line `.error` note beside it, which no
    connector hears of: `cortex status` and `cortex doctor` count them."""
    return sum(1 for _ in paths.rejected.glob("*/*.error")) if paths.rejected.is_dir() else 0


class Erased(EnvelopeError):
    """The message was erased (`cortex erase`): it stays out, and nothing keeps its text."""


def set_aside(paths: Paths, channel: str, name: str, envelope: dict, reason: str) -> Path:
    """A connector's message the gateway refused, kept as a rejected inbox file beside its note, so
    `cortex status` counts it and the owner can fix it and drop it into the inbox again."""
    dest = _unique_destination(paths.rejected / channel, name)
    write_atomic(dest.with_name(dest.name + _NOTE), reason.replace("\n", " ") + "\n")
    write_atomic(dest, json.dumps(envelope, ensure_ascii=False) + "\n")
    return dest


def ingest_message(data: bytes, settings: Settings, db: Database, source: str) -> tuple[int, bool]:
    """One JSON envelope from a connector (the gateway's POST /ingest): the inbox's validation and
    error texts, the same idempotent insert. Returns (bus id, duplicate); raises EnvelopeError."""
    (value,) = decode_values(data, jsonl=False)
    row = validate(value, settings, clock.now(), folder_channel=None)
    bus_id, duplicate = db.run(enqueue_one, row, source)
    if bus_id is None:
        raise Erased(
            f"message {row['external_id']!r} on {row['channel']!r} was erased (`cortex erase`) and is "
            "not taken in again"
        )
    if not duplicate:
        ring_doorbell(db.path)
    return bus_id, duplicate
