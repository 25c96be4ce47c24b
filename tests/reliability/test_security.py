"""Security of what Cortex leaves on disk: a real `cortex run --demo` (ingest, the brain through the
anthropic SDK against the local Messages server, every memory asset, an on-disk Dagster instance
under CORTEX_HOME/dagster_home) started with a permissive umask. Every file and folder it leaves
is user-only, and the API key appears in no file and in no output."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.messages_server import MessagesServer, text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SENTINEL = "sk-ant-api03-SENTINEL-" + "7f3a9c" * 8


def test_a_full_run_leaves_only_user_only_files_and_never_the_api_key(tmp_path):
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "ANTHROPIC_", "DAGSTER_"))}
    with MessagesServer(responder=lambda body: text("Noted — I'll keep that in mind.")) as server:
        env.update(
            CORTEX_HOME=str(home),
            CORTEX_LLM_PROVIDER="anthropic",
            CORTEX_BASE_URL=server.url,
            CORTEX_API_KEY=SENTINEL,
            CORTEX_LLM_RETRIES="0",
        )
        proc = subprocess.run(
            [sys.executable, "-m", "cortex_pipelines.cli", "run", "--demo", "--verbose"],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            preexec_fn=lambda: os.umask(0o022),  # a typical desktop umask: world-readable by default
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert server.requests, "the run never reached the Messages server"
        assert all(SENTINEL in " ".join(h.values()) for h in server.request_headers)  # it was used

    assert SENTINEL not in proc.stdout and SENTINEL not in proc.stderr
    files = [p for p in home.rglob("*") if p.is_file()]
    kinds = {p.relative_to(home).parts[0] for p in files}
    assert {"cortex.duckdb", "lance", "dagster_home", "out", "outbox"} <= kinds, kinds
    assert any(p.suffix == ".db" for p in (home / "dagster_home").rglob("*")), "no Dagster run storage"
    leaked = [p for p in files if SENTINEL.encode() in p.read_bytes()]
    assert leaked == [], f"the API key is in {leaked}"

    loose = [
        f"{p.relative_to(home)} {stat.filemode(p.lstat().st_mode)}"
        for p in [home, *home.rglob("*")]
        if not p.is_symlink() and p.lstat().st_mode & 0o077
    ]
    assert loose == [], "readable by others:\n" + "\n".join(loose)


def test_the_key_is_not_in_a_settings_repr_or_error():
    from cortex_pipelines.config import load_settings

    settings = load_settings(Path("/nonexistent-home"), api_key=SENTINEL, llm_provider="anthropic")
    assert SENTINEL not in repr(settings) and SENTINEL not in str(settings.model_dump())
