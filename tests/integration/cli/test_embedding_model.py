"""Changing `embedding_model` on a home that already has memories: the vectors of two models cannot be
compared, and a model of another width crashed every indexing run ("expected 384 but got array of
size 128"). Now recall keeps answering by keywords until the next run re-embeds everything with the
new model, and answers by meaning again after it; going back re-embeds again."""

from __future__ import annotations

import json

import pytest

from cortex_pipelines.memory.embedder import DEFAULT_MODEL, resolve_model_path
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore
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


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_new_embedding_model_re_embeds_the_home_and_recall_keeps_answering(tmp_path, narrower_model):
    home = tmp_path / "home"
    cortex("init", home=home)
    for text in [STATEMENT, *OTHERS]:
        cortex("send", "webchat", text, home=home)
    cortex("run", home=home)
    assert _made_by(home)[EPISODIC] == (DEFAULT_MODEL, 384)
    assert STATEMENT in _found(home, QUESTION)

    narrower = {"CORTEX_EMBEDDING_MODEL": str(narrower_model)}
    # Before any run re-embeds: keywords still find it, and nothing crashes on the wider vectors.
    found = json.loads(cortex("recall", "peanuts", "--json", home=home, env=narrower).stdout)
    assert STATEMENT in [h["text"] for h in found]

    cortex("send", "webchat", "My sister Ana lives in Porto.", home=home, env=narrower)
    cortex("run", home=home, env=narrower)
    made = _made_by(home)
    assert made[EPISODIC] == (str(narrower_model), 128)
    assert made[SEMANTIC] in (None, (str(narrower_model), 128))
    store = VectorStore(home / "lance")
    assert store.count(EPISODIC) >= 4  # every turn, the older ones re-embedded
    found = json.loads(cortex("recall", QUESTION, "--json", home=home, env=narrower).stdout)
    assert STATEMENT in [h["text"] for h in found]

    cortex("run", home=home)  # back to the default model
    assert _made_by(home)[EPISODIC] == (DEFAULT_MODEL, 384)
    assert STATEMENT in _found(home, QUESTION)
