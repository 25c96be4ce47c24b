"""Untrusted text on its way into a published file or a Dagster preview.

Senders, message texts, fact texts and model output are written by whoever can reach an inbox. A
newline in a sender id forged a heading and a decision line in narrative.md; `<script>` reached the
bulletin; a line cut before it was redacted leaked a token's prefix. So every such field goes
through `one_line`, in this order: redact (while the secret is whole), collapse to one line,
escape, and only then shorten.
"""

from __future__ import annotations

import re
from collections.abc import Callable

REDACTED = "[redacted]"
_NOT_REDACTED = r"(?!\[redacted\])"
# Words that announce a secret, then what counts as its value: anything after ":" or "=", but only a
# long token with a digit after "is" or a space ("the token is 3f9a…", not "the token is missing").
_SECRET_WORD = (
    r"(?i:\b(?:api[_ -]?key|access[_ -]?key|secret(?:[_ -]?key)?|client[_ -]?secret|private[_ -]?key"
    r"|(?:auth|access|refresh|bot)[_ -]?token|token)s?\b)"
)
# A password is short and may be any word: after ":" or "=" whatever follows, after "is" a word with a
# digit ("the password is hunter2", not "the password is wrong"); English and German.
_PASSWORD_WORD = r"(?i:\b(?:password|passwort|kennwort|passwd|passphrase|pwd)s?\b)"
# A PIN or lock code looks like any short number (a year, a pin of a chip, a zip code): only the word
# that announces it tells, so PIN, passcode, CVV, combination, a door/gate/alarm/locker/safe/… code or
# "the code for the gate", never "code" alone ("the code is 200 lines", "status code 404", "zip code
# 10115"). India's "pin code" (a postcode) is redacted too: hiding a postcode costs less than a PIN.
_CODE_WORD = (
    r"(?i:\b(?:pin(?:[ -]?(?:code|number|nummer))?|puk|pass[ -]?code|combination(?: lock)?|cvv2?|cvc2?"
    r"|(?:door|gate|garage|alarm|locker|safe|lock|padlock|security|access|entry|entrance|keypad|unlock"
    r"|wi-?fi|wlan|router|building|front[ -]?door)"
    r"[ -]?code|code\s+to\s+get\s+in"
    r"|code\s+(?:for|to|of)(?:\s+(?:the|my|our|your))?(?:\s+(?:front|back|main|bike))?"
    r"\s+(?:door|gate|garage|alarm|locker|safe|lock|padlock|keypad|building|house|flat|apartment|entrance)"
    r"|geheimzahl|geheimnummer|(?:zahlen)?kombination"
    r"|(?:tür|haustür|tor|garagen|zugangs|alarm|tresor|schließfach|sicherheits|schloss)code)s?\b)"
)
# Then what it is said to be: after ":", "=" or "is" (also "the PIN for my card is", "PIN backup:"),
# a value of 3 or more digits; straight after the word ("PIN 4417") 4 or more and not a year ("Pin 3
# on the board", "access code 2024 rollout"). The value needs its digits ("the PIN is wrong" is not
# one) and takes letters, dashes, spaced digit groups and a trailing # or *; a time, a decimal or a
# date is no code.
# What a PIN or a combination may be "for" before its value: a card, an account, a lock ("the PIN for
# my card is …", "the combination to the safe is …"), never any thing ("the combination of rice and
# beans is 300 calories", "the pin for the tent was 150 mm long").
_LOCKED = (
    r"(?:cards?|bank|account|phone|mobile|sim|safe|lock|padlock|locker|door|gate|bike|shed|garage|alarm"
    r"|debit|credit|atm|visa|mastercard|amex|building|house|flat|apartment|entrance|keypad|wi-?fi|router"
    r"|box|vault|tresor|karte|konto|handy)"
)
# Where or whom a secret is for, between its word and "is" ("my locker code at the gym is",
# "Password for the wifi at the cottage:", "der Code im Büro ist"): one or two prepositions, each
# with one to three words. The value after it still has to be a code (digits, no measure), so "the
# pin for the tent was 150 mm" and "the door code at the gym is on the fridge" stay as said.
_PREPOSITION = r"(?i:at|in|on|for|of|to|from|by|im|am|bei|für|von|zum|zur|der|des)"
_PLACE = rf"(?:\s+{_PREPOSITION}(?:\s+[^\s:=,;.!?]+){{1,3}}?){{1,2}}?"
_SAID_TO_BE = r"\s+(?i:is|was|ist|war|lautet)\b"
_CODE_ANNOUNCED = (
    r"(?:\s+(?i:for|of|to|on|für|von|zum|zur|der|des)(?:\s+[^\s:=,;.!?]+){0,2}?\s+(?i:"
    + _LOCKED
    + r")\b|\s+[^\W\d_]+(?=\s*[:=])|"
    + _PLACE
    + rf"(?={_SAID_TO_BE}))?"
    r"(?:\s*[:=]|\s+(?i:is|was|ist|war|lautet)(?:\s*:)?|['’]s)\s*[\"'“‘]?"
)
# A number with a unit after it is a measure, not a code ("is 300 calories", "was 180 kg").
_A_MEASURE = (
    r"(?!\s*(?:%|(?i:kg|g|mm|cm|km|m|kcal|cal|calories|euros?|eur|pounds?|dollars?|usd|percent|minutes?"
    r"|mins?|hours?|hrs?|days?|weeks?|months?|years?|people|persons|times)\b))"
)


def _code_value(digits: int) -> str:
    return (
        _NOT_REDACTED
        + r"(?!\d{4}-\d\d-\d\d\b)(?P<secret>(?:"
        + rf"(?=(?:[A-Za-z-]*\d){{{digits}}})[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*"
        + rf"|(?=\d(?:[ -]?\d){{{digits - 1}}})\d+(?:[ -]\d+){{0,3}}"
        + r")(?:[#*](?!\w))?)(?![\w-]|[:.,/]\d)"
        + _A_MEASURE
    )


def _luhn(number: str) -> bool:
    digits = [int(d) for d in reversed(number)]
    return (sum(digits[0::2]) + sum(sum(divmod(2 * d, 10)) for d in digits[1::2])) % 10 == 0


class _CardNumbers:
    """A full payment-card number, whole or in the groups a card prints (4-4-4-4, Amex 4-6-5) with
    spaces or dashes, that starts as the networks' numbers do (2 to 6) and passes the Luhn check:
    the check is what keeps a long order number or a timestamp out, and no regex can do it."""

    pattern = (
        r"(?<![\w+.,/-])(?:[2-6]\d{12,18}|[2-6]\d{3}(?P<sep>[ -])\d{4}(?:(?P=sep)\d{4}){1,2}"
        r"(?:(?P=sep)\d{1,4})?|3\d{3}(?P<amex>[ -])\d{6}(?P=amex)\d{4,5})(?![\w-]|[.,]\d)"
    )
    _regex = re.compile(pattern)

    def _valid(self, match: re.Match[str]) -> bool:
        number = re.sub(r"[ -]", "", match.group())
        return 13 <= len(number) <= 19 and _luhn(number)

    def search(self, text: str) -> re.Match[str] | None:
        return next((m for m in self._regex.finditer(text) if self._valid(m)), None)

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        return self._regex.sub(lambda m: repl(m) if self._valid(m) else m.group(), text)


class _NextCode:
    """The codes that follow a redacted one in a list or a change ("PINs: 1234 and 5678", "the lock
    code was 1234, now 5678", "1234 → 5678"): each is as secret as the first. Applied until nothing
    more is found, since each redaction may announce the next."""

    pattern = (
        re.escape(REDACTED)
        + r"(?:\s*(?:[,;/]|->|→)\s*|\s+)(?:(?i:and|or|but|then|now|it['’]s|it\s+is|is|changed\s+to"
        r"|became|the\s+new\s+one\s+is|new(?:\s+one)?:?)\s+){0,3}"
    ) + _code_value(3)
    _regex = re.compile(pattern)

    def search(self, text: str) -> re.Match[str] | None:
        return self._regex.search(text)

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        while (done := self._regex.sub(repl, text)) != text:
            text = done
        return text


# Said before its word: "4417 is my PIN", "5580 was the door code", "1234 is the PIN for my card".
_CODE_BEFORE_ITS_WORD = (
    r"(?<![\w.,/+-])(?P<secret>\d{3,}(?:[ -]\d+){0,3})\s+"
    r"(?i:is|was|will\s+be|becomes|is\s+now)\s+(?i:my|our|the|his|her|their|your)\s+"
    r"(?:[^\W\d_]+\s+){0,2}?"
    + _CODE_WORD
    + r"(?:\s+(?i:for|of|to|on)(?:\s+[^\s:=,;.!?]+){0,2}?\s+(?i:"
    + _LOCKED
    + r")\b)?(?=\s*(?:[.,;:!?)]|$))"
)

SECRET_PATTERNS: list[re.Pattern[str] | _CardNumbers | _NextCode] = [
    # PEM blocks first, while their lines are still lines; an unterminated one runs to the end.
    re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
        re.DOTALL,
    ),
    re.compile(r"sk-ant-[A-Za-z0-9_-]+"),  # Anthropic, any length: a cut one is still a prefix
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),  # OpenAI (sk-, sk-proj-, sk-svcacct-)
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"\b(?:xox[abprs]|xapp)-[A-Za-z0-9-]{10,}"),  # Slack
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"(?<![\w:])\d{8,10}:[A-Za-z0-9_-]{35}(?![\w-])"),  # Telegram bot tokens
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWTs
    re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"),  # Stripe secret and restricted keys
    re.compile(r"\bAIza[A-Za-z0-9_-]{30,}"),  # Google API keys
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),  # Hugging Face
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),  # GitLab personal access tokens
    re.compile(r"\bnpm_[A-Za-z0-9]{30,}"),  # npm
    re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),  # SendGrid
    # The password of a URL (postgres://admin:PASSWORD@host, redis://:PASSWORD@host).
    re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:" + _NOT_REDACTED + r"(?P<secret>[^\s/@]+)@"),
    re.compile(r"(?i)\bbearer\s+" + _NOT_REDACTED + r"(?P<secret>[A-Za-z0-9._~+/=-]{12,})"),
    re.compile(
        r"(?i)\bauthorization\s*[:=]\s*[\"']?basic\s+" + _NOT_REDACTED + r"(?P<secret>[A-Za-z0-9+/=]{4,})"
    ),
    re.compile(
        _PASSWORD_WORD
        + rf"(?:{_PLACE}(?=\s*[:=]))?"
        + r"\s*[:=]\s*[\"']?"
        + _NOT_REDACTED
        + r"(?P<secret>[^\s\"',;]+)"
    ),
    re.compile(
        _PASSWORD_WORD
        + rf"(?:{_PLACE}(?={_SAID_TO_BE}))?"
        + r"\s+(?i:is|was|ist|war|lautet)\s+[\"']?"
        + _NOT_REDACTED
        + r"(?P<secret>(?=[^\s\"',;]*\d)[^\s\"',;]{4,})"
    ),
    _CardNumbers(),
    re.compile(_CODE_WORD + _CODE_ANNOUNCED + _code_value(3)),
    re.compile(_CODE_WORD + r"\s+(?!(?:19|20)\d\d(?![\w-]))" + _code_value(4)),
    re.compile(r"(?i:\b(?:cvv|cvc)2?s?\b)\s+" + _code_value(3)),  # a card's CVV/CVC has 3 or 4 digits
    re.compile(_CODE_BEFORE_ITS_WORD),
    _NextCode(),
    re.compile(_SECRET_WORD + r"\s*[:=]\s*[\"']?" + _NOT_REDACTED + r"(?P<secret>[^\s\"',;]{6,})"),
    re.compile(
        _SECRET_WORD
        + r"(?:\s+(?:is|was|are))?\s+[\"']?"
        + r"(?P<secret>(?=[A-Za-z0-9+/=_-]*\d)[A-Za-z0-9+/=_-]{16,})"
    ),
]

_INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_INLINE = re.compile(r"[\\`<>|]|&(?=#?\w+;)|\[(?=\[)|\](?=[\](])")
_INLINE_ESCAPES = {"\\": "\\\\", "`": "\\`", "<": "&lt;", ">": "&gt;", "|": "\\|", "&": "&amp;"}
# What makes a line start a heading, list, quote, fence, table, setext underline or link definition.
_LINE_START = re.compile(r"^(?:[#*+=~-]|\[(?!redacted\])|\d+(?=[.)]))")
# What GFM turns into a link by itself (Dagster's UI renders previews so): a stranger's
# "https://evil.example/login" was a live link beside their name, and one cut short a broken one.
_AUTOLINK = re.compile(r"(?i)\b(https?|ftp)(?=://)|\b(www)(?=\.)")
_PARTIAL_ESCAPE = re.compile(r"(?:\\+|&[#\w]*)$")


def _redact_match(match: re.Match) -> str:
    if "secret" not in match.re.groupindex:
        return REDACTED
    start, end = match.span("secret")
    text, offset = match.group(0), match.start()
    return text[: start - offset] + REDACTED + text[end - offset :]


def redact_secrets(text: str) -> str:
    """Credentials replaced by [redacted], whole: call it before anything cuts the text."""
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(_redact_match, text)
    return text


def redact_key(text: str, key: str | None) -> str:
    """Credentials and the configured key gone, with anything that starts like the key: a field
    cut short may hold its prefix, and a proxy's key need not look like any known one."""
    text = redact_secrets(text)
    if key and len(key) >= 8:
        text = re.sub(re.escape(key[:8]) + r"\S*", REDACTED, text)
    return text


def escape(text: str) -> str:
    """One line of text that markdown and HTML show as written: no tags, code spans, table cells,
    links (bare URLs included), output directives ([[…]]) or line-start markup."""
    text = _INLINE.sub(lambda m: _INLINE_ESCAPES.get(m.group(), m.group() + "\\"), text)
    text = _AUTOLINK.sub(lambda m: m.group() + "\\", text)  # "https\://", "www\.": shown, not linked
    start = _LINE_START.match(text)
    if start:
        text = text[: start.end()] + "\\" + text[start.end() :] if start.group().isdigit() else "\\" + text
    return text


def one_line(text: object, limit: int) -> str:
    """Untrusted text as one published field: redacted, on one line, escaped, at most `limit`
    characters (cut with "…", never inside an escape)."""
    if limit < 2:
        raise ValueError("limit must leave room for the text and the cut marker")
    text = escape(" ".join(_INVISIBLE.sub(" ", redact_secrets(str(text))).split()))
    if len(text) <= limit:
        return text
    return _PARTIAL_ESCAPE.sub("", text[: limit - 1]).rstrip() + "…"


def document(markdown: str) -> str:
    """Markdown written by a model (the synthesized bulletin): its headings and lists stay, but no
    secret, tag, output directive, bare link or invisible character gets through."""
    return "\n".join(
        _AUTOLINK.sub(
            lambda m: m.group() + "\\",
            _INVISIBLE.sub(" ", line).replace("<", "&lt;").replace(">", "&gt;").replace("[[", "[\\["),
        )
        for line in redact_secrets(markdown).splitlines()
    )
