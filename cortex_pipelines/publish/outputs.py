"""Writing published files: atomically, only when their inputs changed, never crashing.

A file is rebuilt only when its input key (a digest of what it is made from) changes, so idle
runs leave it byte-identical and a prompt cache built on it stays warm. A write that fails (a
read-only or vanished folder) does not stop the run: the last good file stays, and the result
says it was not written, and why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from duckdb import DuckDBPyConnection

from cortex_pipelines.config import Settings
from cortex_pipelines.files import write_atomic
from cortex_pipelines.publish.safe import SECRET_PATTERNS, redact_key
from cortex_pipelines.storage import Database, utcnow
from cortex_pipelines.storage.published import mark_current, published_row, record_written


def digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def redact(text: str, settings: Settings) -> str:
    """Published files must never carry a credential, even one a user pasted into a chat. The
    configured key goes with anything that starts like it: a field cut short may hold its prefix."""
    return redact_key(text, settings.resolved_api_key())


def find_secrets(text: str, settings: Settings) -> list[str]:
    found = [p.pattern for p in SECRET_PATTERNS if p.search(text)]
    key = settings.resolved_api_key()
    if key and len(key) >= 8 and key in text:
        found.append("the configured API key")
    return found


@dataclass
class Published:
    """One published file after a run: `content` is what is on disk now; `error` says why this
    run's version is not (the write failed, or the render did)."""

    name: str
    path: Path
    content: str
    changed: bool
    error: str | None = None
    # The render failed (the model was down), not the write: the previous file stays and is still
    # true, so the check warns rather than fails.
    render_failed: bool = False
    details: dict[str, int | str] = field(default_factory=dict)  # what the run counted, for its report
    # What it was made from changed while it was rendered: nothing was written.
    stale: bool = False

    @property
    def written(self) -> bool:
        return self.error is None

    @property
    def chars(self) -> int:
        return len(self.content)

    @property
    def words(self) -> int:
        return len(self.content.split())


def publish(
    db: Database,
    settings: Settings,
    name: str,
    render: Callable[[], str],
    input_key: str | None = None,
    still_current: Callable[[DuckDBPyConnection], bool] | None = None,
) -> Published:
    """Write `name` if its content changed. With an input_key (for renders that cost an LLM call)
    the render itself is skipped while the key and the file on disk are unchanged.

    A render that takes seconds (an LLM call) may come back after another process changed what it
    was made from, and published from the change (a forget): `still_current(con)` is asked in the
    transaction that writes, so no commit falls between the check and the write."""
    path = settings.paths.published[name]
    row = db.run(published_row, name)
    now = utcnow()
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    intact = current is not None and row is not None and _sha(current) == row["sha256"]
    if input_key is not None and intact and row["input_key"] == input_key:
        db.run(mark_current, name, now)
        return Published(name, path, current, changed=False)
    content = redact(render(), settings)
    if intact and content == current:
        db.run(mark_current, name, now, input_key)
        return Published(name, path, current, changed=False)

    def write(con) -> Published:
        if still_current is not None and not still_current(con):
            return Published(name, path, current or "", changed=False, stale=True)
        try:
            write_atomic(path, content)
        except OSError as exc:
            error = f"could not write {path}: {exc.strerror or exc}; kept the last good file"
            return Published(name, path, current or "", changed=False, error=error)
        record_written(con, name, path, input_key, _sha(content), len(content), len(content.split()), now)
        return Published(name, path, content, changed=True)

    return db.run(write)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
