"""Common credential formats a user pastes into a chat never reach the published files, and ordinary
sentences that look a little like them are published as said.

The owner's messages are dropped into the inbox as a connector drops them, `cortex run` answers them
and materializes every asset (compaction at once, so hot-snapshot.md holds every turn), and then every
file under out/ is read. test_untrusted_text.py covers the formats known before these.
"""

from __future__ import annotations

import json
import re

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


# PINs and codes, as said and as published: the words stay, the value goes.
CODES = [
    ("My bank PIN is 4417", "My bank PIN is [redacted]"),
    ("my locker code is 4471", "my locker code is [redacted]"),
    ("the alarm code is 5520", "the alarm code is [redacted]"),
    ("PIN: 4417", "PIN: [redacted]"),
    ("PIN 4417", "PIN [redacted]"),
    ("pin = 4417", "pin = [redacted]"),
    ("PIN code is 0000, don't tell anyone", "PIN code is [redacted], don't tell anyone"),
    ("Remember that my bank PIN is 4417-ZQX.", "Remember that my bank PIN is [redacted]."),
    ("the PIN for my debit card is 5791", "the PIN for my debit card is [redacted]"),
    ("My PIN is 1984", "My PIN is [redacted]"),  # a year is a PIN when it is said to be one
    ("passcode: 908172", "passcode: [redacted]"),
    ("the door code is 44-17", "the door code is [redacted]"),
    ("the code for the gate is 1234#", "the code for the gate is [redacted]"),
    ("the code to the front door is 4455", "the code to the front door is [redacted]"),
    ("the combination is 12-34-56", "the combination is [redacted]"),
    ("safe code is 12 34 56", "safe code is [redacted]"),
    ('gate code is "4411"', 'gate code is "[redacted]"'),
    ("keypad code 1397 then push", "keypad code [redacted] then push"),
    ("entry code is 2580*", "entry code is [redacted]"),
    ("security code: 123", "security code: [redacted]"),
    ("CVV 123 and the CVC is 321", "CVV [redacted] and the CVC is [redacted]"),
    ("Meine Geheimzahl ist 1234", "Meine Geheimzahl ist [redacted]"),
    ("Der Türcode lautet 4711", "Der Türcode lautet [redacted]"),
    ("Zugangscode: 99887", "Zugangscode: [redacted]"),
    ("Die PIN für die Karte ist 2468", "Die PIN für die Karte ist [redacted]"),
    ("my card is 4111 1111 1111 1111 thanks", "my card is [redacted] thanks"),
    ("card 4111-1111-1111-1111", "card [redacted]"),
    ("paid with 4012888888881881.", "paid with [redacted]."),
    ("amex 3782 822463 10005", "amex [redacted]"),
    # review (helper-53): a contraction, "the code to get in", a wifi code, a combination lock
    ("my pin's 4417", "my pin's [redacted]"),
    ("the code to get in is 4471", "the code to get in is [redacted]"),
    ("Our wifi code is 88442211", "Our wifi code is [redacted]"),
    ("Combination lock on the shed: 7-3-9", "Combination lock on the shed: [redacted]"),
    ("the combination to the safe is 12-34-56", "the combination to the safe is [redacted]"),
    # a code before its word, and the codes after a redacted one in a list or a change
    ("4417 is my PIN", "[redacted] is my PIN"),
    ("I think 5580 was the door code.", "I think [redacted] was the door code."),
    ("1234 is the PIN for my card, ok", "[redacted] is the PIN for my card, ok"),
    ("Lock code was 1234, now 5678", "Lock code was [redacted], now [redacted]"),
    ("PINs: 1234, 5678 and 9012", "PINs: [redacted], [redacted] and [redacted]"),
    ("the PIN was 1234, changed to 5678.", "the PIN was [redacted], changed to [redacted]."),
    ("gate code 1234 → 5678", "gate code [redacted] → [redacted]"),
    # where or whom the code is for, between its word and "is": these were published as said
    ("My locker code at the gym is 4417.", "My locker code at the gym is [redacted]."),
    ("The door code at my mum's is 1984#", "The door code at my mum's is [redacted]"),
    ("the alarm code for the office is 2580", "the alarm code for the office is [redacted]"),
    ("the PIN at the new bank is 7788", "the PIN at the new bank is [redacted]"),
    ("The gate code at work was 1357, now 2468", "The gate code at work was [redacted], now [redacted]"),
    ("Der Schließfachcode im Fitnessstudio ist 4417", "Der Schließfachcode im Fitnessstudio ist [redacted]"),
    ("Our wifi password at the cottage is sunny2024", "Our wifi password at the cottage is [redacted]"),
    ("Password for the wifi: hunter22", "Password for the wifi: [redacted]"),
]
# Said as they are, and published as they are: no secret in them.
NOT_CODES = [
    "PIN the meeting to the top, please.",
    "The PIN is wrong, I locked the card.",
    "I changed my PIN in 2024.",
    "the postcode is SW1A 1AA",
    "zip code 10115",
    "code review is at 3",
    "the code is broken",
    "the code is 200 lines",
    "the error code is 5003 again",
    "the code freeze is at 14:00",
    "Pin 3 on the board is ground, pin 12 too.",
    "access code 2024 rollout",
    "the PIN expires 2025-01-01",
    "the door code is on the fridge",
    "a combination of 3 drugs",
    "order number 12345678",
    "my phone number is 07700 900123",
    "order 1234567890123 shipped",  # 13 digits, Luhn fails
    "the card ends 4111 1111 1111 1112",  # a card's shape, Luhn fails
    "created at 1700000000000 ms",  # a timestamp, no card network starts with 1
    "version 4.12.3 is out",
    # review (helper-53): "combination" or "pin" of any thing, and a measure after "is"
    "The combination of rice and beans is 300 calories",
    "The combination of both offers is 250 euros cheaper",
    "His combination was 180 kg in total",
    "The pin for the tent was 150 mm long",
    "Pin for the noticeboard: 300 needed",
    "2024 is the year my PIN changed",
    "300 is the combination of rice and beans",
    "My PIN is [redacted] and 3 tries are left",
    "the door code is [redacted], 10 minutes walk",
    # a place between the word and "is", and no code after it
    "the door code at the gym is on the fridge",
    "The password for the wifi is on the router",
    "the error code in the log is 5003",
    "the PIN at position 3 is 1",
]


@pytest.mark.parametrize(("said", "published"), CODES)
def test_pins_codes_and_card_numbers_are_redacted_and_the_words_stay(said, published):
    assert redact_secrets(said) == published
    assert redact_secrets(published) == published  # nothing left to find once redacted


@pytest.mark.parametrize("said", NOT_CODES)
def test_sentences_about_pins_codes_and_numbers_are_not_redacted(said):
    assert redact_secrets(said) == said


# What the QA pass found in narrative.md and BOOTSTRAP.md: codes the owner told the assistant.
OWNER_CODES = {
    "bank PIN": ("4417", "My bank PIN is {}"),
    "locker code": ("4471", "my locker code is {}"),
    "door code": ("5580", "{} is the door code for the flat"),
    "bike lock": ("9302", "The bike lock code was 2203, now {}"),
    "office alarm code": ("2580", "The alarm code at the office is {}"),
    "wifi password": ("sunny7781", "Password for the wifi at the cottage: {}"),
}


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pin_the_owner_tells_is_in_no_published_file_and_recall_still_finds_it(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    for code, template in OWNER_CODES.values():
        cortex("send", "webchat", template.format(code), "--sender", "maya", home=home)
    cortex("run", home=home, env={"CORTEX_COMPACTION_IDLE_MINUTES": "0"})

    files = {p.name: p.read_text(encoding="utf-8") for p in (home / "out").iterdir() if p.is_file()}
    assert {"narrative.md", "BOOTSTRAP.md", "memory_bulletin.md", "hot-snapshot.md"} <= set(files), files
    assert "My bank PIN is [redacted]" in files["narrative.md"]
    assert "my locker code is [redacted]" in files["BOOTSTRAP.md"]
    for name, text in files.items():
        for kind, (code, _) in OWNER_CODES.items():
            assert not re.search(rf"(?<!\w){code}(?!\w)", text), f"the {kind} is in {name}"
    for kind, (code, template) in OWNER_CODES.items():  # the brain's own memory keeps it
        assert template.format(code) in cortex("recall", kind, home=home).stdout
