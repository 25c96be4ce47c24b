"""Writing published files: atomically, only when their inputs changed, never crashing.

A file is rebuilt only when its input key (a digest of what it is made from) changes, so idle
runs leave it byte-identical and a prompt cache built on it stays warm. A write that fails (a
read-only or vanished folder) is a warning: the last good file stays and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cortex_pipelines.config import Settings
from cortex_pipelines.files import write_atomic
from cortex_pipelines.publish.safe import REDACTED, SECRET_PATTERNS, redact_secrets
from cortex_pipelines.storage import Database, utcnow

FILES = {
    "narrative": "narrative.md",
    "boot_context": "BOOTSTRAP.md",
    "memory_bulletin": "memory_bulletin.md",
}


def digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def redact(text: str, settings: Settings) -> str:
    """Published files must never carry a credential, even one a user pasted into a chat. The
    configured key goes with anything that starts like it: a field cut short may hold its prefix."""
    text = redact_secrets(text)
    key = settings.resolved_api_key()
    if key and len(key) >= 8:
        text = re.sub(re.escape(key[:8]) + r"\S*", REDACTED, text)
    return text


def find_secrets(text: str, settings: Settings) -> list[str]:
    found = [p.pattern for p in SECRET_PATTERNS if p.search(text)]
    key = settings.resolved_api_key()
    if key and len(key) >= 8 and key in text:
        found.append("the configured API key")
    return found


@dataclass
class Published:
    name: str
    path: Path
    content: str
    changed: bool
    warning: str | None = None

    @property
    def chars(self) -> int:
        return len(self.content)

    @property
    def words(self) -> int:
        return len(self.content.split())


def state(db: Database, name: str) -> dict | None:
    rows = db.query_dicts("SELECT * FROM published WHERE name = ?", [name])
    return rows[0] if rows else None


def set_state(db: Database, name: str, value: str, error: str | None = None) -> None:
    path = FILES.get(name, name)
    db.run(
        lambda con: con.execute(
            "INSERT INTO published (name, path, state, error) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET state = excluded.state, error = excluded.error",
            [name, path, value, error],
        )
    )


def publish(
    db: Database, settings: Settings, name: str, render: Callable[[], str], input_key: str | None = None
) -> Published:
    """Write `name` if its content changed. With an input_key (for renders that cost an LLM call)
    the render itself is skipped while the key and the file on disk are unchanged."""
    path = settings.paths.out / FILES[name]
    row = state(db, name)
    now = utcnow()
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    intact = current is not None and row is not None and _sha(current) == row["sha256"]
    if input_key is not None and intact and row["input_key"] == input_key:
        _verified(db, name, now)
        return Published(name, path, current, changed=False)
    content = redact(render(), settings)
    if intact and content == current:
        _verified(db, name, now, input_key)
        return Published(name, path, current, changed=False)
    try:
        write_atomic(path, content)
    except OSError as exc:
        return Published(
            name,
            path,
            current or "",
            changed=False,
            warning=f"could not write {path}: {exc.strerror or exc}; kept the last good file",
        )
    db.run(
        lambda con: con.execute(
            """
        INSERT INTO published (name, path, input_key, sha256, chars, words, generated_at, verified_at,
                               state, error)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'warm', NULL)
        ON CONFLICT (name) DO UPDATE SET input_key = excluded.input_key, sha256 = excluded.sha256,
            chars = excluded.chars, words = excluded.words, generated_at = excluded.generated_at,
            verified_at = excluded.verified_at, state = 'warm', error = NULL
        """,
            [name, str(path), input_key, _sha(content), len(content), len(content.split()), now, now],
        )
    )
    return Published(name, path, content, changed=True)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _verified(db: Database, name: str, now, input_key: str | None = None) -> None:
    db.run(
        lambda con: con.execute(
            "UPDATE published SET verified_at = ?, input_key = coalesce(?, input_key), state = 'warm', "
            "error = NULL WHERE name = ?",
            [now, input_key, name],
        )
    )
