"""The `cortex` command line, run for real as subprocesses against a throwaway CORTEX_HOME.

Each test asserts what a user would notice: exit codes, one-line errors, `status --json`,
`outbox --json`, and the files left in the inbox and outbox folders. The offline LLM provider
is forced (no network, deterministic replies).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from tests.support.cli import CALL_TIMEOUT_S, cli_argv, cli_env, cortex
from tests.support.dagster_dev import free_port


def status_json(home: Path, env: dict[str, str] | None = None) -> dict:
    return json.loads(cortex("status", "--json", home=home, env=env).stdout)


def outbox_json(home: Path, env: dict[str, str] | None = None) -> list[dict]:
    return json.loads(cortex("outbox", "--json", home=home, env=env).stdout)


def inbox_files(home: Path) -> list[Path]:
    """Files still waiting in the inbox (the .rejected/.ingested archives excluded)."""
    inbox = home / "inbox"
    if not inbox.exists():
        return []
    return sorted(
        p for p in inbox.rglob("*") if p.is_file() and not p.relative_to(inbox).parts[0].startswith(".")
    )


def outbox_files(home: Path, channel: str | None = None) -> list[Path]:
    root = home / "outbox" / channel if channel else home / "outbox"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def write_jsonl(path: Path, messages: list[dict]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return path


def bus_id_of(home: Path, channel: str, external_id: str) -> int:
    """Read-only peek into the bus, only once no cortex process is running."""
    con = duckdb.connect(str(home / "cortex.duckdb"), read_only=True)
    try:
        row = con.execute(
            "SELECT id FROM bus WHERE channel = ? AND external_id = ?", [channel, external_id]
        ).fetchone()
    finally:
        con.close()
    assert row is not None, f"no bus row for ({channel}, {external_id})"
    return row[0]


# --------------------------------------------------------------------------------------------
# 1 + 2: the acceptance scenario, then a second run on the same home
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """From a clean CORTEX_HOME: init, four sends (one a duplicate id), one malformed file, run."""
    home = tmp_path_factory.mktemp("acceptance") / "cortex-home"
    cortex("init", home=home)
    cortex("send", "webchat", "Hi, what's on my calendar tomorrow?", "--external-id", "a1", home=home)
    cortex(
        "send",
        "telegram",
        "Urgent: the production server is down!",
        "--priority",
        "urgent",
        "--external-id",
        "u1",
        home=home,
    )
    cortex("send", "webchat", "Also remind me to buy milk.", "--external-id", "a2", home=home)
    dup = cortex(
        "send", "webchat", "Hi again, did you get my first message?", "--external-id", "a1", home=home
    )

    bad = home / "inbox" / "webchat" / "bad.json"
    bad.write_text('{"channel": "webchat", "text": ', encoding="utf-8")
    past = time.time() - 10
    os.utime(bad, (past, past))

    run = cortex("run", home=home)
    return {
        "home": home,
        "dup": dup,
        "run": run,
        "status": status_json(home),
        "outbox": outbox_json(home),
    }


@pytest.mark.slow
def test_acceptance_scenario(scenario: dict) -> None:
    home: Path = scenario["home"]
    assert (home / "cortex.duckdb").is_file()
    assert (home / "dagster_home" / "dagster.yaml").is_file()
    # The duplicate external id is accepted by `send` (dedup happens at ingest), and `run` says so.
    assert scenario["dup"].returncode == 0
    assert "ingested 3 message(s), 1 duplicate(s), 1 rejected file(s)" in scenario["run"].stdout

    state = scenario["status"]
    assert state["bus"]["completed"] == 3, state
    assert state["bus"]["pending"] == 0, state
    assert state["bus"]["failed"] == 0, state
    assert state["bus"]["processing"] == 0, state
    assert state["channels"]["webchat"] == "live"
    assert state["channels"]["telegram"] == "live"
    assert state["llm"]["provider"] == "offline"
    assert state["llm"]["calls"] >= 3

    # The malformed file is quarantined with a one-line reason; nothing is left in the inbox.
    rejected = home / "inbox" / ".rejected" / "webchat" / "bad.json"
    assert rejected.is_file()
    assert rejected.read_text(encoding="utf-8") == '{"channel": "webchat", "text": '
    note = rejected.with_name("bad.json.error").read_text(encoding="utf-8")
    assert note.endswith("\n") and note.count("\n") == 1 and note.strip(), repr(note)
    assert "JSON" in note
    assert "bad.json" in scenario["run"].stderr
    assert inbox_files(home) == []
    # ...and `cortex status` and `cortex doctor` keep saying so: no connector hears of it.
    assert state["inbox_rejected"] == 1
    assert "inbox    1 file(s) rejected" in cortex("status", home=home).stdout
    assert "1 file(s) rejected" in cortex("doctor", home=home).stdout

    # Three replies waiting, the urgent one first.
    replies = scenario["outbox"]
    assert isinstance(replies, list) and len(replies) == 3, replies
    for reply in replies:
        assert {"channel", "text", "reply_to"} <= reply.keys()
        assert isinstance(reply["text"], str) and reply["text"].strip()
    urgent_id = bus_id_of(home, "telegram", "u1")
    assert replies[0]["channel"] == "telegram"
    assert replies[0]["reply_to"] == urgent_id
    assert [r["channel"] for r in replies[1:]] == ["webchat", "webchat"]
    assert len({r["reply_to"] for r in replies}) == 3  # the duplicate was not answered twice
    # The first text for an external id wins; the re-send under a1 is not a new message.
    assert replies[1]["reply_to"] == bus_id_of(home, "webchat", "a1")
    assert replies[2]["reply_to"] == bus_id_of(home, "webchat", "a2")

    # Connectors see one file per reply under outbox/<channel>/.
    assert len(outbox_files(home, "telegram")) == 1
    assert len(outbox_files(home, "webchat")) == 2


def test_init_is_idempotent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = cortex("init", home=home)
    assert "wrote" in first.stdout
    assert (home / "cortex.duckdb").is_file()
    again = cortex("init", home=home)
    assert "wrote" not in again.stdout


@pytest.mark.slow
def test_second_run_is_a_no_op(scenario: dict) -> None:
    home: Path = scenario["home"]
    before_status = status_json(home)
    before_outbox = outbox_json(home)
    before_files = outbox_files(home)

    cortex("run", home=home)

    after_status = status_json(home)
    assert outbox_json(home) == before_outbox
    assert outbox_files(home) == before_files
    assert after_status["llm"]["calls"] == before_status["llm"]["calls"]
    assert after_status["llm"]["input_tokens"] == before_status["llm"]["input_tokens"]
    assert after_status["bus"] == before_status["bus"]


# --------------------------------------------------------------------------------------------
# 3: bad input → non-zero exit, one line on stderr, nothing queued
# --------------------------------------------------------------------------------------------


def _assert_one_line_failure(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{proc.stderr}"
    assert lines[0].startswith("cortex:"), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("send", "Bad/Chan", "hi"), "channel"),
        (("send", "webchat", ""), "text"),
        (("send", "webchat", "   "), "text"),
        (("send", "webchat", "hi", "--priority", "loud"), "priority"),
        (("send", "admin", "forget everything", "--sender", "maya"), "cortex chat"),
    ],
    ids=["path-like-channel", "empty-text", "blank-text", "bad-priority", "admin-channel"],
)
def test_bad_send_fails_with_one_line(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    home = tmp_path / "home"
    proc = cortex(*args, home=home, check=False)
    _assert_one_line_failure(proc, needle)
    assert inbox_files(home) == []


def test_unknown_channel_fails_with_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = cortex("send", "nosuchchannel", "hi", home=home, check=False)
    assert proc.returncode != 0
    assert "nosuchchannel" in proc.stderr  # the reason itself is right...
    assert inbox_files(home) == []
    _assert_one_line_failure(proc, "nosuchchannel")  # ...but it is wrapped over two lines


def test_a_misspelt_variable_fails_with_one_line_naming_it(tmp_path: Path) -> None:
    """As a misspelt config.toml key does: ignored, it left the default in force unnoticed."""
    home = tmp_path / "home"
    proc = cortex("status", home=home, check=False, env={"CORTEX_BRAIN_LINGER_SECOND": "10"})
    _assert_one_line_failure(proc, "CORTEX_BRAIN_LINGER_SECOND", "did you mean CORTEX_BRAIN_LINGER_SECONDS?")
    # in config.toml too, and a bad value without pydantic's "Value error, "
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("brain_linger_second = 10\n")
    proc = cortex("status", home=home, check=False)
    _assert_one_line_failure(proc, "setting 'brain_linger_second'", "did you mean 'brain_linger_seconds'?")
    (home / "config.toml").write_text('timezone = "Mars/Base"\n')
    proc = cortex("status", home=home, check=False)
    _assert_one_line_failure(proc, "CORTEX_TIMEZONE: unknown timezone 'Mars/Base'")


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("recall", "where do I live"),
        ("stats",),
        ("recent",),
        ("pins",),
        ("schedules",),
        ("outbox",),
    ],
)
def test_a_command_that_only_reads_names_a_missing_home_instead_of_making_one(tmp_path: Path, args) -> None:
    """`cortex status` in the wrong folder made an empty ./.cortex there and reported it as empty."""
    home = tmp_path / "not-here"
    proc = cortex(*args, home=home, check=False)
    assert proc.returncode == 2
    _assert_one_line_failure(proc, f"no Cortex home at {home}", "cortex init")
    assert not home.exists()


def test_outbox_of_an_unknown_channel_fails_with_one_line(tmp_path: Path) -> None:
    """It said "outbox is empty" and exited 0: a typo looked like no replies."""
    proc = cortex("outbox", "webchta", home=tmp_path / "home", check=False)
    _assert_one_line_failure(proc, "unknown channel 'webchta' (did you mean 'webchat'?)")


def test_send_to_a_mistyped_channel_names_the_one_meant(tmp_path: Path) -> None:
    proc = cortex("send", "webcaht", "hi", home=tmp_path / "home", check=False)
    _assert_one_line_failure(
        proc, "unknown channel 'webcaht' (did you mean 'webchat'?); add it to CORTEX_CHANNELS"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [(("dev", "--port", "99999"), "65535"), (("save", "I like tea", "-i", "2.5"), "integer")],
    ids=["port-out-of-range", "importance-not-1-2-3"],
)
def test_out_of_range_options_are_refused_before_anything_runs(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    proc = cortex(*args, home=tmp_path / "home", check=False)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


def test_recall_shows_a_long_memory_shortened(tmp_path: Path) -> None:
    """A pasted 10,000-character message filled the terminal; --json still has it whole."""
    home = tmp_path / "home"
    cortex("send", "webchat", "budget " + "spreadsheet-" * 1000, home=home)  # a run of no spaces too
    cortex("run", home=home)
    first = cortex("recall", "budget", home=home).stdout.splitlines()[0]
    assert first.startswith("1. [") and first.endswith("…") and len(first) < 320, first
    assert first.count("spreadsheet") > 10, first
    whole = json.loads(cortex("recall", "budget", "--json", home=home).stdout)[0]["text"]
    assert len(whole) > 10_000


def test_bad_config_value_names_the_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = cortex("status", home=home, check=False, env={"CORTEX_DEFAULT_MODE": "loud"})
    _assert_one_line_failure(proc, "CORTEX_DEFAULT_MODE")
    assert proc.stdout == ""


# --------------------------------------------------------------------------------------------
# 4: shadow mode
# --------------------------------------------------------------------------------------------


def test_shadow_channel_is_answered_but_not_delivered(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shadow = {"CORTEX_CHANNEL_MODES": json.dumps({"whatsapp": "shadow"})}
    cortex("send", "whatsapp", "Hello from WhatsApp, are you there?", home=home, env=shadow)
    cortex("run", home=home, env=shadow)

    state = status_json(home, env=shadow)
    assert state["channels"]["whatsapp"] == "shadow"
    assert state["bus"]["completed"] == 1
    assert state["bus"]["pending"] == 0 and state["bus"]["failed"] == 0
    assert state["outbox"]["waiting"] == 0
    assert outbox_json(home, env=shadow) == []
    assert outbox_files(home, "whatsapp") == []


# --------------------------------------------------------------------------------------------
# 5 + 6: bulk ingest
# --------------------------------------------------------------------------------------------


def _messages(channel: str, n: int, prefix: str) -> list[dict]:
    return [
        {
            "channel": channel,
            "text": f"{prefix} message number {i}",
            "sender": "alice",
            "external_id": f"{prefix}-{i}",
            "timestamp": f"2026-01-0{i + 1}T10:00:00Z",
        }
        for i in range(n)
    ]


def test_ingest_file_is_idempotent_and_folder_rejects_bad_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    batch = write_jsonl(tmp_path / "batch.jsonl", _messages("webchat", 3, "bulk"))

    first = cortex("ingest", str(batch), home=home)
    assert "ingested 3 message(s), 0 duplicate(s), 0 rejected file(s)" in first.stdout
    second = cortex("ingest", str(batch), home=home)
    assert "ingested 0 message(s), 3 duplicate(s), 0 rejected file(s)" in second.stdout
    assert batch.exists()  # bulk import leaves the source in place

    folder = tmp_path / "drop"
    folder.mkdir()
    write_jsonl(folder / "good.jsonl", _messages("telegram", 2, "good"))
    (folder / "bad.json").write_text('{"channel": "telegram", "text": 42, "sender": "bob"}', encoding="utf-8")
    mixed = cortex("ingest", str(folder), home=home, check=False)
    assert mixed.returncode == 1, mixed
    assert "bad.json" in mixed.stderr
    assert "good.jsonl" not in mixed.stderr
    assert "ingested 2 message(s), 0 duplicate(s), 1 rejected file(s)" in mixed.stdout

    state = status_json(home)
    assert state["bus"]["pending"] == 5, state
    assert state["channels"].keys() >= {"webchat", "telegram"}
    assert inbox_files(home) == []


def test_ingest_missing_path_fails_with_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = cortex("ingest", "nope.jsonl", home=home, check=False)
    _assert_one_line_failure(proc, "nope.jsonl")


def test_ingest_rejection_is_one_line_per_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = tmp_path / "a-folder-with-a-reasonably-long-name-like-real-exports-have"
    folder.mkdir()
    (folder / "bad.json").write_text('{"channel": "webchat", "text": 42, "sender": "bob"}', encoding="utf-8")
    proc = cortex("ingest", str(folder), home=home, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(folder / "bad.json") in lines[0]


def test_history_import_is_stored_but_never_answered(tmp_path: Path) -> None:
    home = tmp_path / "home"
    history = write_jsonl(tmp_path / "past.jsonl", _messages("webchat", 4, "history"))
    out = cortex("ingest", "--history", str(history), home=home)
    assert "ingested 4 message(s)" in out.stdout

    cortex("run", home=home)

    state = status_json(home)
    assert state["bus"]["completed"] == 4, state
    assert state["bus"]["pending"] == 0 and state["bus"]["failed"] == 0
    assert state["outbox"]["waiting"] == 0
    assert outbox_json(home) == []
    assert outbox_files(home) == []


OLD_STATEMENTS = ["I'm vegetarian.", "On flights I prefer window seats.", "My sister Ana lives in Porto."]


@pytest.mark.slow
def test_facts_from_imported_history_start_cold_and_stay_searchable(tmp_path: Path) -> None:
    """Two years of imported chat made every fact hot: over the hot cap (its check red), and in the
    floor of every prompt, until eviction reached them 14 days later."""
    home = tmp_path / "home"
    old = [
        {"channel": "webchat", "sender": "maya", "text": text, "timestamp": f"2025-0{n + 3}-10T09:00:00Z"}
        for n, text in enumerate(OLD_STATEMENTS)
    ]
    cortex("ingest", "--history", str(write_jsonl(tmp_path / "past.jsonl", old)), home=home)
    cortex("send", "webchat", "I'm allergic to peanuts.", home=home)
    cortex("run", home=home, env={"CORTEX_HOT_CAP": "1"})

    memory = status_json(home)["memory"]
    assert memory["hot"] == 1 and memory["cold"] >= 2, memory  # today's fact hot, the old ones cold
    found = json.loads(cortex("recall", "vegetarian", "--json", home=home).stdout)
    assert [h["text"] for h in found if h.get("fact_id")][:1] == ["I'm vegetarian."]
    assert status_json(home)["memory"]["hot"] == 2  # recalled, so back in hot memory


# --------------------------------------------------------------------------------------------
# 7: status while a run holds the database
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_status_works_while_a_run_writes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    n = 40
    queued = write_jsonl(
        tmp_path / "queue.jsonl",
        [
            {
                "channel": "webchat" if i % 2 else "telegram",
                "text": f"Concurrent message {i}: hello?",
                "sender": "carol",
                "external_id": f"c-{i}",
            }
            for i in range(n)
        ],
    )
    assert f"ingested {n} message(s)" in cortex("ingest", str(queued), home=home).stdout

    log = (tmp_path / "run.out").open("w+", encoding="utf-8")
    runner = subprocess.Popen(
        cli_argv("run"), env=cli_env(home), stdout=log, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    observed: list[dict] = []
    during_run = 0  # status calls that started and finished while the run was alive
    try:
        while runner.poll() is None or len(observed) < 5:
            alive_before = runner.poll() is None
            proc = cortex("status", "--json", home=home, check=False)
            assert proc.returncode == 0, f"status failed during a run:\n{proc.stderr}"
            observed.append(json.loads(proc.stdout))
            assert sum(observed[-1]["bus"].values()) == n
            during_run += alive_before and runner.poll() is None
        rc = runner.wait(timeout=CALL_TIMEOUT_S)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        log.seek(0)
        run_output = log.read()
        log.close()
    assert rc == 0, run_output
    assert len(observed) >= 5
    assert during_run >= 2, f"only {during_run} status call(s) overlapped the run"

    completed = [s["bus"]["completed"] for s in observed]
    assert completed == sorted(completed), completed  # progress never goes backwards
    final = status_json(home)
    assert final["bus"]["completed"] == n, final
    assert final["bus"]["pending"] == 0 and final["bus"]["processing"] == 0
    assert len(outbox_json(home)) == n


@pytest.mark.slow
def test_a_relative_cortex_home_is_taken_from_the_folder_the_command_runs_in(tmp_path: Path) -> None:
    """`CORTEX_HOME=my-home cortex run` failed with a Dagster traceback: DAGSTER_HOME, made from
    it, must be absolute. The home is resolved where the command runs."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli_argv(*args),
            env=cli_env(Path("my-home")),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT_S,
        )

    assert run("send", "webchat", "I keep the spare key under the blue pot").returncode == 0
    done = run("run")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (reply,) = (tmp_path / "my-home" / "outbox" / "webchat").glob("*.json")
    assert json.loads(reply.read_text())["reply_to"] == 1


def test_a_failed_run_names_the_cause_not_dagsters_wrapper(tmp_path):
    """A model that cannot be reached failed the run with "step extracted_facts failed: …Error
    occurred while executing op "extracted_facts":", which stopped where the cause began."""
    home = tmp_path / "home"
    cortex("send", "webchat", "I prefer tea over coffee", home=home)
    unreachable = {
        "CORTEX_LLM_PROVIDER": "anthropic",
        "CORTEX_API_KEY": "test-key",
        "CORTEX_BASE_URL": f"http://127.0.0.1:{free_port()}",
        "CORTEX_LLM_RETRIES": "0",
        "CORTEX_MAX_ATTEMPTS": "1",
    }
    ran = cortex("run", home=home, env=unreachable, check=False)
    assert ran.returncode == 1
    failed = [line for line in ran.stderr.splitlines() if " failed: " in line]
    assert failed and all("Connection refused" in line for line in failed), ran.stderr


def test_a_run_with_a_long_indexing_backlog_says_so_before_it_starts(tmp_path: Path) -> None:
    """The first `cortex run` after importing 60,000 messages printed nothing for 18 minutes."""
    home = tmp_path / "home"
    history = tmp_path / "history.jsonl"
    history.write_text(
        "".join(
            json.dumps({"channel": "webchat", "sender": "user", "text": f"note {n}", "external_id": f"h{n}"})
            + "\n"
            for n in range(1000)
        )
    )
    cortex("ingest", str(history), "--history", home=home)
    first = cortex("run", home=home).stdout
    assert "\nindexing 1,000 messages not in memory yet: this run takes minutes" in first, first
    assert "indexing" not in cortex("run", home=home).stdout  # indexed now
