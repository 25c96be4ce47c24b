"""Common credential formats a user pastes into a chat never reach the published files, and ordinary
sentences that look a little like them are published as said.

The owner's messages are dropped into the inbox as a connector drops them, `cortex run` answers them
and materializes every asset (compaction at once, so hot-snapshot.md holds every turn), and then every
file under out/ is read. test_untrusted_text.py covers the formats known before these.
"""

from __future__ import annotations

import json

import pytest

from cortex_pipelines.publish.safe import one_line, redact_secrets
from tests.support.cli import cortex

# The secret, and the message it was said in.
SECRETS = {
    "stripe live": (
        "sk_live_51HxYzAbCdEfGhIjKlMnOpQrStUv",
        "I decided to rotate the Stripe key {} tomorrow.",
    ),
    "stripe test": ("sk_test_4eC39HqLyjWDarjtT1zdp7dc", "The staging Stripe key is {} for now."),
    "stripe restricted": ("rk_live_51HxYzAbCdEfGhIjKlMnOp", "Our reporting job uses {} to read charges."),
    "url password": ("S3cr3tPassw0rd", "I prefer the db at postgres://admin:{}@db.example.com/app"),
    "url password, no user": ("r3dis-Pa55", "The cache lives at redis://:{}@cache.internal:6379/0"),
    "google": ("AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW", "My Google Maps key is {} for the trip app."),
    "hugging face": ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "I pushed the model with {} yesterday."),
    "gitlab": ("glpat-AbCdEfGhIjKlMnOpQrSt", "The CI clones with {} from now on."),
    "npm": ("npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "I publish the package with {} each release."),
    "sendgrid": (
        "SG.AbCdEfGhIjKlMnOpQrStUv.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg",
        "The newsletter sends through {} on Mondays.",
    ),
    "basic auth": ("dXNlcjpwYXNz", "The webhook needs Authorization: Basic {} in every call."),
    "password is": ("hunter2", "My router password is {} and I keep forgetting it."),
    "passwort": ("Sommer24", "Das WLAN Passwort: {} für die Gäste."),
    "password colon": ("tr0ub4", "Note for the bank portal, password: {} until I change it."),
}
# Said as they are, and published as they are.
ORDINARY = [
    "My password manager is 1Password and I love it.",
    "The hf_ prefix marks a Hugging Face token in our docs.",
    "I forgot my password again, so I reset it this morning.",
    "We went over the basic authorization flow with the team.",
    "The password is wrong on the old laptop.",
]
CHANNELS = [
    "webchat",
    "telegram",
    "signal",
    "whatsapp",
    "discord",
    "slack",
]  # hot-snapshot keeps 12 turns each


def _said() -> list[str]:
    return [template.format(secret) for secret, template in SECRETS.values()] + ORDINARY


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pasted_credentials_of_common_formats_are_in_no_published_file(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    for n, said in enumerate(_said()):
        channel = CHANNELS[n % len(CHANNELS)]
        folder = home / "inbox" / channel
        folder.mkdir(parents=True, exist_ok=True)
        body = {"channel": channel, "sender": "maya", "text": said, "external_id": f"m{n}"}
        (folder / f".m{n}.tmp").write_text(json.dumps(body), encoding="utf-8")
        (folder / f".m{n}.tmp").rename(folder / f"m{n}.json")
    cortex("run", home=home, env={"CORTEX_COMPACTION_IDLE_MINUTES": "0"})

    files = {p.name: p.read_text(encoding="utf-8") for p in (home / "out").iterdir() if p.is_file()}
    assert {"narrative.md", "BOOTSTRAP.md", "memory_bulletin.md", "hot-snapshot.md"} <= set(files), files
    snapshot = files["hot-snapshot.md"]
    assert "postgres://admin:[redacted]@db.example.com/app" in snapshot  # the rest of the message stays
    assert "Stripe key [redacted] tomorrow" in files["narrative.md"]
    for name, text in files.items():
        for kind, (secret, _) in SECRETS.items():
            assert secret not in text, f"the {kind} secret is in {name}"
    for sentence in ORDINARY:
        assert sentence in snapshot, f"{sentence!r} was not published as said"


@pytest.mark.parametrize(
    "said", [*ORDINARY, "the sk_live_ prefix", "see https://example.com:8080/a@b", "tom@example.com"]
)
def test_ordinary_sentences_are_not_redacted(said):
    assert redact_secrets(said) == said


@pytest.mark.parametrize("kind", list(SECRETS))
def test_a_field_cut_anywhere_keeps_no_part_of_the_secret(kind):
    secret, template = SECRETS[kind]
    for limit in range(10, 80):
        assert secret[:6] not in one_line(template.format(secret), limit)
