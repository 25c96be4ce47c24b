"""What the user said is found by meaning before and after the memory assets run: materializing
memory (the episodic table, facts, observations) must not push a statement out of recall's top 5."""

from __future__ import annotations

import json
import subprocess

import pytest

from bench.paraphrase import load_distractors, load_items, paraphrase_turns
from tests.support.cli import cli_argv, cli_env


@pytest.mark.soak
@pytest.mark.slow
def test_a_statement_found_by_meaning_is_still_found_once_memory_is_materialized(tmp_path):
    """The paraphrase set's statements among its small talk, requests and other facts, then one
    question sharing no content word with its statement, one `cortex run` (answer, then
    materialize): the reply quotes the statement, and `cortex recall` of the same question later
    still returns it. Before, two things pushed it out once indexed: the feedback search (which only
    indexed turns get) lifted turns sharing one word with the best matches ("food", "out") at full
    weight, and the asked question itself, at ~0.9 to the query, set the best cosine that every
    statement's vector share is measured against."""
    items = load_items()
    asked = next(i for i in items if i["id"] == "preferences-cilantro")
    turns = paraphrase_turns(items, load_distractors(), [asked])
    home = tmp_path / "home"
    folder = home / "inbox" / "webchat"
    folder.mkdir(parents=True)
    envelopes = [
        {"channel": "webchat", "sender": "user", "text": t.text, "external_id": t.key}
        | {"timestamp": t.at.isoformat()}
        for t in turns
    ]
    (folder / "batch.jsonl").write_text("".join(json.dumps(e) + "\n" for e in envelopes))
    env = cli_env(home)
    run = subprocess.run(cli_argv("run"), env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    replies = {}
    for path in (home / "outbox" / "webchat").glob("*.json"):
        body = json.loads(path.read_text())
        replies[body["reply_to"]] = body["text"]
    reply = replies[len(envelopes)]  # bus ids follow the batch order: the question is the last
    assert asked["statement"] in reply, reply
    found = subprocess.run(
        cli_argv("recall", asked["question"], "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert found.returncode == 0, found.stdout + found.stderr
    texts = [hit["text"] for hit in json.loads(found.stdout)]
    assert asked["statement"] in texts, texts
