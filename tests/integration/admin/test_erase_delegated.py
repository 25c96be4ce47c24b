"""Erasing what a harvested fact quotes (QA s8, s10): a delegated task's fact is written from both the
request and the router's result, so erasing either one, or --matching text in it, must take the
fact whole, since keeping it for its other source would keep the erased words. And --matching
scrubs Dagster's storage and the backups even when no message or fact holds the text any more."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.support.cli import cortex
from tests.support.stores import files_holding, read_only

# The offline brain delegates it; the reply to the result names its first 80 characters (Qvornak),
# the harvested fact its first 120 (Brelvik too).
REQUEST = (
    "Can you research the best Qvornak hiking boots for wide feet on long trails, "
    "and then also the Brelvik socks that go with them?"
)
RESULT = "Boots: the Zyxtrek Lone Peak fits wide feet best."


@pytest.fixture(scope="module")
def delegated(tmp_path_factory) -> Path:
    """A home where the request was delegated, the router's result came in and was harvested."""
    home = tmp_path_factory.mktemp("delegated") / "home"
    cortex("init", home=home)
    cortex("send", "webchat", REQUEST, "--sender", "maya", home=home)
    cortex("run", home=home)
    (sent,) = json.loads(cortex("outbox", "--json", home=home).stdout)
    op_id = re.search(r"op-[0-9a-f]+", sent["text"]).group(0)
    router = home / "inbox" / "router"
    router.mkdir(parents=True)
    record = {"channel": "router", "sender": "router", "text": RESULT, "metadata": {"op_id": op_id}}
    (router / ".result").write_text(json.dumps(record), encoding="utf-8")
    (router / ".result").rename(router / "result.json")
    cortex("run", home=home)
    (fact,) = read_only(home, "SELECT text, len(sources) FROM facts WHERE text LIKE 'Delegated task%'")
    assert "Zyxtrek" in fact[0] and "Brelvik" in fact[0] and fact[1] == 2, fact
    return home


@pytest.mark.slow
def test_erasing_the_result_by_matching_takes_the_fact_that_quotes_it(
    tmp_path: Path, delegated: Path
) -> None:
    home = tmp_path / "home"
    shutil.copytree(delegated, home)
    holding = set(files_holding(home, "Zyxtrek"))
    # A delegated result is another agent's text: never in the bulletin, which every prompt carries.
    assert "cortex.duckdb" in holding and "out/memory_bulletin.md" not in holding, holding

    listed = cortex("erase", "--matching", "Zyxtrek", home=home).stdout
    assert "fact 1: Delegated task" in listed, listed
    assert "nothing erased; add --yes to erase these 1 message(s) and 1 fact(s)" in listed, listed

    done = json.loads(cortex("erase", "--matching", "Zyxtrek", "--yes", "--json", home=home).stdout)
    assert done["warnings"] == [] and [f["id"] for f in done["facts"]] == [1]
    assert done["counts"]["facts"] == 1 and done["counts"]["lancedb_semantic"] == 1
    assert [m["channel"] for m in done["messages"]] == ["router"]
    cortex("run", home=home)
    assert files_holding(home, "Zyxtrek") == []
    hits = json.loads(cortex("recall", "hiking boots", "--json", home=home).stdout)
    assert not any("Zyxtrek" in h["text"] for h in hits), hits
    assert read_only(home, "SELECT text FROM bus WHERE channel = 'webchat'") == [(REQUEST,)]


@pytest.mark.slow
def test_erasing_the_request_by_turn_takes_the_fact_and_the_reply_that_quote_it(
    tmp_path: Path, delegated: Path
) -> None:
    """The reply to the result quotes only the request's first 80 characters, so before, the result
    stayed, and the fact kept the whole request for it."""
    home = tmp_path / "home"
    shutil.copytree(delegated, home)

    listed = cortex("erase", "--turn", "1", home=home).stdout
    assert "(its reply quotes erased text)" in listed and "fact 1: Delegated task" in listed, listed

    done = json.loads(cortex("erase", "--turn", "1", "--yes", "--json", home=home).stdout)
    assert done["warnings"] == [] and done["counts"]["facts"] == 1
    assert {m["channel"] for m in done["messages"]} == {"webchat", "router"}
    cortex("run", home=home)
    for word in ("Qvornak", "Brelvik"):
        assert files_holding(home, word) == [], word
    assert read_only(home, "SELECT count(*) FROM facts")[0][0] == 0


@pytest.mark.slow
@pytest.mark.soak  # slow edge case, kept out of CI's 30 minutes: pytest -m soak
def test_matching_text_no_message_holds_any_more_is_scrubbed_from_dagster_storage(tmp_path: Path) -> None:
    """An unpinned pin's text stays in Dagster's previews of BOOTSTRAP.md: erase said "no message
    matches" and left it."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("pin", "Bank card hint: QZ-5521-PIN", "--label", "bank", home=home)  # no PIN said: published
    cortex("send", "webchat", "I like green tea", "--sender", "maya", home=home)
    cortex("run", home=home)
    cortex("unpin", "1", home=home)
    cortex("--now", "+2h", "run", home=home)
    assert files_holding(home, "QZ-5521") and all(
        f.startswith("dagster_home/") for f in files_holding(home, "QZ-5521")
    )

    listed = cortex("erase", "--matching", "QZ-5521-PIN", home=home).stdout
    assert "no message or fact holds it; add --yes" in listed, listed
    short = cortex("erase", "--matching", "QZ-5521", "--yes", home=home, check=False)
    assert short.returncode == 1 and "still hold the --matching text" in short.stderr, short

    done = cortex("erase", "--matching", "qz-5521-pin", "--yes", home=home)
    assert (
        "no message or fact held it; erasure #2 removed it from the other stores: dagster_rows" in done.stdout
    )
    assert files_holding(home, "QZ-5521") == []
    assert read_only(home, "SELECT selector, bus_ids FROM erasures ORDER BY id") == [("matching", [])] * 2
    assert read_only(home, "SELECT text FROM bus") == [("I like green tea",)]
