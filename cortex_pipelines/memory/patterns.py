"""Capture patterns for the offline extractor, as data: add a language by adding rows.

Each row is (language, category, importance 1–3, regex). Sources: seed 002's auto-capture
triggers, seed 003's decision patterns, and plain first-person statements of identity,
preference and goals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Capture:
    language: str
    category: str
    importance: int
    pattern: re.Pattern[str]


_ROWS: list[tuple[str, str, int, str]] = [
    # identity
    ("en", "identity", 3, r"\bmy name is\b|\bcall me [A-Z]"),
    ("en", "identity", 3, r"\bI (live|grew up|was born) in\b|\bI(?:'?m| am) based in\b|\bI moved to\b"),
    (
        "en",
        "identity",
        3,
        r"\bI work (as|at|for)\b|\bI(?:'?m| am) an? (freelance|self-employed|senior|junior)\b",
    ),
    ("en", "identity", 3, r"\bmy (wife|husband|partner|daughter|son|sister|brother|dog|cat)('s name)? is\b"),
    ("de", "identity", 3, r"\bich hei(ß|ss)e\b|\bich wohne in\b|\bich arbeite als\b"),
    # preferences
    ("en", "preference", 2, r"\bI (really |much |strongly )?(prefer|love|like to|enjoy|hate|dislike)\b"),
    ("en", "preference", 2, r"\bI (do not|don'?t|never) (like|want|eat|drink)\b|\bI can'?t stand\b"),
    ("en", "preference", 2, r"\bI(?:'?m| am) (a )?(vegetarian|vegan|allergic|lactose intolerant|gluten)"),
    ("en", "preference", 2, r"\bmy favou?rite\b"),
    ("de", "preference", 2, r"\bich (mag|liebe|bevorzuge|hasse)\b|\bich mag kein"),
    # decisions (seed 003)
    ("en", "decision", 2, r"\b(we|I)( have|'ve)? decided\b|\bdecided to\b|\bchose to\b|\bdecision:"),
    ("en", "decision", 2, r"\b(we'?re|we are|I'?m|I am) going (to go )?with\b|\blet'?s go with\b"),
    ("en", "decision", 2, r"\bwe agreed (to|on|that)\b|\bthe plan is to\b"),
    ("de", "decision", 2, r"\b(wir|ich) (haben|habe) (beschlossen|entschieden)\b|\bentschieden\b"),
    ("de", "decision", 2, r"\bwir machen das so\b|\bdie entscheidung\b"),
    # goals
    ("en", "goal", 2, r"\bmy goal is\b|\bI (want|plan|intend|hope) to\b|\bI(?:'?m| am) planning to\b"),
    ("en", "goal", 2, r"\b(need|have) to (ship|finish|launch|deliver|submit)\b.*\bby\b"),
    ("de", "goal", 2, r"\bmein ziel ist\b|\bich will\b|\bich plane\b"),
    # insights and explicit memory requests (seed 002 triggers)
    ("en", "insight", 3, r"\blesson learned\b|\bI reali[sz]ed that\b|\bkey insight\b"),
    ("en", "fact", 3, r"^\s*(important|critical)\s*:|\bremember (this|that)\b|\bdon'?t forget\b"),
    ("de", "fact", 3, r"\bmerk dir\b|\bvergiss nicht\b|\bwichtig:"),
    ("en", "event", 2, r"\b(moved|rescheduled|postponed|cancell?ed) (the|our|my)\b.*\b(to|until)\b"),
]

CAPTURES: list[Capture] = [
    Capture(lang, category, importance, re.compile(rx, re.IGNORECASE))
    for lang, category, importance, rx in _ROWS
]

# Words that open a sentence without carrying meaning; stripped so restatements dedupe.
LEADING_FILLER = re.compile(
    r"^\s*(((remember|note|keep in mind)( that)?|fyi|btw|by the way|also|oh|and|so|ok|okay|"
    r"honestly|actually|just so you know|for the record|important|critical)\b[\s,:;!-]*)+",
    re.IGNORECASE,
)


def classify(sentence: str) -> tuple[str, int] | None:
    """(category, importance) of a sentence: the most specific category that matches (an explicit
    "remember this" only raises importance), and the highest importance of any match."""
    matched = [c for c in CAPTURES if c.pattern.search(sentence)]
    if not matched:
        return None
    specific = [c for c in matched if c.category != "fact"]
    category = (specific or matched)[0].category
    return category, max(c.importance for c in matched)


# Knowledge updates (memory/updates.py): the attribute of the user's life a statement is about,
# named by the words that name the attribute, never by its values ("bank", "accounts"; not
# "Barclays"), so a value the table has never seen still counts; only a small closed class is named
# by its values as well (coffee drinks: "I switched to oat cortados"). Two statements about a shared
# attribute are compared leniently; a statement naming none is compared on meaning alone. Each row
# is (language, attribute, regex); several languages may share an attribute.
_ATTRIBUTE_ROWS: list[tuple[str, str, str]] = [
    (
        "en",
        "home",
        r"\b(live|living|lives|moved (in)?to|flat|apartment|house|address|rent|landlord|"
        r"neighbou?rhood)\b",
    ),
    ("de", "home", r"\b(wohne|wohnung|umgezogen|adresse|miete)\b"),
    (
        "en",
        "work",
        r"\b(works? (as|at|for|in)|working (as|at|for|in)|jobs?|employer|employed|company|colleagues?|boss|"
        r"promot\w*|hired|career|first day at|started (as|at)|shifts?|junior|senior|developer|engineer)\b",
    ),
    ("de", "work", r"\b(arbeite\w*|stelle|firma|chef|kollegen)\b"),
    (
        "en",
        "commute",
        r"\b(commute|commuting|bus|train|tube|subway|cycle|cycling|bike|"
        r"to work|to the office)\b",
    ),
    ("en", "money", r"\b(bank(s|ing)?|accounts?|mortgage|credit card|savings|pension)\b"),
    ("de", "money", r"\b(bank|konto|sparkasse)\b"),
    ("en", "phone", r"\b(phone|smartphone|mobile)\b"),
    ("de", "phone", r"\b(handy|telefon)\b"),
    ("en", "number", r"\b(number|numbers)\b"),
    ("de", "number", r"\b(nummer)\b"),
    ("en", "vehicle", r"\b(car|cars|drive|driving|vehicle|motorbike)\b"),
    ("de", "vehicle", r"\b(auto|fahre)\b"),
    (
        "en",
        "partner",
        r"\b(girlfriend|boyfriend|partner|wife|husband|fianc[eé]e?|dating|married|divorced|spouse)\b",
    ),
    ("de", "partner", r"\b(freundin|partnerin|verheiratet)\b"),
    ("en", "diet", r"\b(eat|eating|diet|vegan|vegetarian|pescatarian|meat)\b"),
    ("en", "fitness", r"\b(gym|membership|fitness|workouts?)\b"),
    ("en", "running", r"\b(run|runs|running|jog|jogging|marathon)\b"),
    (
        "en",
        "drink",
        r"\b(coffee|tea|latte|espresso|cappuccino|flat whites?|cortados?|americanos?|macchiatos?|mochas?|"
        r"usual order)\b",
    ),
    ("en", "sleep", r"\b(bed|bedtime|sleep\w*|asleep|turn(ing)? in|night owl)\b"),
    ("en", "insurance", r"\b(insurance|insurer|insures?|insured|polic(y|ies))\b"),
    ("en", "energy", r"\b(electricity|energy|gas|supplier|tariff)\b"),
    ("en", "computer", r"\b(laptop|computer|pc|desktop|machine)\b"),
    ("en", "doctor", r"\b(gp|doctor|dr|physio|therapist|clinic)\b"),
    ("de", "doctor", r"\b(arzt|ärztin|hausarzt)\b"),
    ("en", "dentist", r"\b(dentists?|dental)\b"),
    (
        "en",
        "medication",
        r"\b(medication|medicine|meds|pills?|prescri\w*|put me on|dose|tablets?|inhaler|"
        r"hay fever|allerg\w*)\b",
    ),
    ("en", "pet", r"\b(pets?|dog|cat|puppy|kitten)\b"),
    ("en", "language", r"\b(languages?|lessons?|speak)\b"),
    ("en", "team", r"\b(support|supporter|fan|allegiance|team|club)\b"),
    ("en", "groceries", r"\b(groceries|grocery|supermarket|weekly shop|food shop)\b"),
    # where someone studies, not "a friend since school"
    (
        "en",
        "school",
        r"(?<!since )(?<!from )\b(school|academy|primary|nursery|kindergarten|university|college)\b"
        r"(?! friends?)",
    ),
    ("en", "subscription", r"\b(subscribe\w*|subscription|signed up|streaming)\b"),
    ("en", "internet", r"\b(broadband|internet|wifi|wi-fi|fibre|provider)\b"),
    ("en", "restaurant", r"\b(restaurant|pizza|takeaway|caf[eé])\b"),
    ("en", "instrument", r"\b(instrument|play(ing)? the|lessons?)\b"),
]

ATTRIBUTES: list[tuple[str, re.Pattern[str]]] = [
    (attribute, re.compile(rx, re.IGNORECASE)) for _, attribute, rx in _ATTRIBUTE_ROWS
]


def attributes_of(text: str) -> frozenset[str]:
    """The attributes of the user's life a statement names ("I bank with Barclays": money)."""
    return frozenset(attribute for attribute, pattern in ATTRIBUTES if pattern.search(text))


_LOOKAROUND = re.compile(r"\(\?<?[=!][^()]*\)")
# RE2's \b knows only ASCII letters ("café", "Ärztin" would not match): a boundary before a word
# becomes "start or a character that is no letter", one after it "end or such a character".
_BOUNDARY = re.compile(r"\\b")
_NOT_A_LETTER = r"[^\p{L}\p{N}_]"


def _re2(rx: str) -> str:
    rx = _LOOKAROUND.sub("", rx)

    def boundary(match: re.Match) -> str:
        before = match.start() == 0 or rx[match.start() - 1] in "(|:"
        return f"(?:^|{_NOT_A_LETTER})" if before else f"(?:$|{_NOT_A_LETTER})"

    return _BOUNDARY.sub(boundary, rx)


def naming_any(attributes: frozenset[str]) -> str:
    """One regex for DuckDB (RE2: no lookaround, an ASCII-only \\b) matching every text that names
    any of the attributes, and a few more: lookarounds are dropped, so `attributes_of` decides."""
    return "|".join(_re2(rx) for _, attribute, rx in _ATTRIBUTE_ROWS if attribute in attributes)
