"""Knowledge updates: a newer statement about the same subject supersedes the older one.

"I live in Lisbon", then ten days later "I moved to Porto last week": asked where the user lives,
recall must say Porto first and keep Lisbon as history. Detection is offline and cheap, and runs
only on turns that announce a change (a few per cent): a statement with a change marker ("moved
to", "switched", "now", "instead", "no longer", …) supersedes the earlier owner statement that
recall finds for it, when the two are close in meaning: leniently when both name the same attribute
of the user's life (memory/patterns.py: "I bank with Barclays", "I moved all my accounts to
Monzo"), strictly otherwise. The link is stored between the turns (storage/updates.py); facts drawn
only from superseded turns get their valid_to.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np

from cortex_pipelines.memory.dates import MONTH_NAME, PLAN_TIME
from cortex_pipelines.memory.patterns import ATTRIBUTES, attributes_of
from cortex_pipelines.memory.snapshot import STOP_WORDS, tokenize
from cortex_pipelines.text import never_an_answer, retraction_with_news, split_sentences

# Words that say something changed or replaced what was true before (EN, DE). A marker alone links
# nothing: the earlier statement must also be what recall finds for this one, and close in meaning.
CHANGE = re.compile(
    r"(?<!right )\b(now|nowadays|these days|any ?more|no longer|no more|instead|switched|switching|"
    r"changed|moved|started|starting|joined|quit|dropped|cancell?ed|sold|replaced|swapped|gone|"
    r"became|promoted|up to|took up|taken up|done with|adopted|registered|first day|went with|opted for|"
    r"found a (new|better|different)|"
    # the common ways of saying a state ended or began, beyond the words above
    r"stopped|gave up|given up|ditched|upgraded|downgraded|got rid of|(went|gone|going) back to|"
    r"relocated|transferred|retired|graduated|(broke|broken|split) up|traded|"
    r"(took|taken|accepted|got) (a|the) job|cut (back|down)|from now on|lately|"
    # a plan that moved: "The launch has been pushed back to April", "brought forward to the 26th"
    r"pushed (\w+ ){0,4}back|brought (\w+ ){0,4}forward|postponed|rescheduled|delayed|"
    r"this (year|month|week|term|season)|a different|got a new|been off|any longer|"
    r"since (" + MONTH_NAME + r"|last \w+|\d{4}))\b"
    # "new" as in "our new pizza spot" or "New number: …", not "the new bakery" or "a new curtain"
    r"|\b(my|our|his|her|their) new\b|^\s*new\b"
    r"|\b(jetzt|nun|inzwischen|mittlerweile|neu(e[nmrs]?)?|stattdessen|nicht mehr|umgezogen|"
    r"gewechselt)\b",
    re.IGNORECASE,
)

# A correction speaks for the user without saying "I": "Oops, correction: the Rome flight is at 7pm,
# not 5pm", "Actually mum's birthday is March 13th". It may correct any statement of the owner's.
CORRECTION = re.compile(
    r"\b(correction|i meant|scratch that|my mistake|i was wrong|i misspoke)\b"
    r"|^\W*(?:oops\W+|sorry\W+)?actually\b|,\s*not\s+[\w:.]+\s*[.!]*$",
    re.IGNORECASE,
)
# "This year" after a perfect of "be" spans a time, it does not start one: "she's been a huge help
# this year" (which superseded "My doctor's practice is the Riverside Clinic"), "I've been to Rome
# twice this month". "Since May" does start one ("I've been vegan since May") and still counts.
SPAN_AFTER_PERFECT = re.compile(r"\bbeen\b.*\bthis (year|month|week|term|season)\b", re.IGNORECASE)


def says_change(sentence: str) -> bool:
    """Whether a sentence corrects what was said (CORRECTION) or has a change word (CHANGE) that
    marks a change there."""
    return (
        bool(CORRECTION.search(sentence))
        or retraction_with_news(sentence)
        or any(
            not (m.group().lower().startswith("this ") and SPAN_AFTER_PERFECT.search(sentence, 0, m.end()))
            for m in CHANGE.finditer(sentence)
        )
    )


# The change must be the user's own: a sentence about themselves ("I moved", "my new", "we
# switched"), or one that opens with the change and leaves the subject out, as chat does
# ("Switched to a Galaxy", "New number: …"). "The client moved the call to 3pm" is news, not an
# update of what the user said about themselves.
FIRST_PERSON = re.compile(
    r"\b(i|i'm|i've|i'd|i'll|me|my|we|we're|we've|us|our|ich|mein\w*|wir|unser\w*)\b", re.I
)
# Words a chat sentence may open with before its change ("Just moved to Leeds"): never a name.
OPENERS = r"(?:just|recently|finally|also|now|today|yesterday|officially|so|well|ok|okay)"
OPENS_WITH_CHANGE = re.compile(
    rf"^\W*(?:{OPENERS}\s+)?"
    r"(switched|moved|changed|started|joined|quit|dropped|cancell?ed|sold|replaced|swapped|new|"
    r"got|bought|ditched|traded|upgraded|relocated|transferred)\b",
    re.I,
)
# Or about someone the user told about, by name, as the sentence's subject ("Anna moved to
# Bristol"): then only an earlier statement naming them can be updated.
NAMED_CHANGE = re.compile(
    rf"^\W*(?!(?:It|He|She|We|They|This|That|There|Here|What|Who|You)\b)(?!(?i:{OPENERS})\b)([A-Z][\w-]+)"
    r"(?:(?:'s| has| is)?\s+(?:just\s+|now\s+)?"
    r"(?:moved|switched|changed|started|joined|quit|left|sold|became|got)\b"
    # or where they are, said to be new, with "he" or "she" to say it is a person: "Tom's at Spotify
    # now, he left his old job", not "Paris is in chaos now" (which superseded "I work in Paris")
    r"|(?=.*\b(?:he|she|his|her|him)\b)(?:'s| is) (?:at|in|with|working)\b.*"
    r"\b(?:now|these days|no longer|any ?more)\b)"
)
# Someone close to the user as the sentence's subject ("My parents just moved to Malaga", "My best
# friend Jess started a new job at Google", "Our neighbours switched to a new dentist"): their news,
# unless the user is in it too ("My wife and I moved", "My doctor put me on cetirizine").
RELATIONS = (
    r"friends?|parents|mum|mom|mother|dad|father|brothers?|sisters?|siblings|sons?|daughters?|kids|"
    r"children|child|wife|husband|partner|boyfriend|girlfriend|fianc[eé]e?|neighbou?rs?|boss|manager|"
    r"colleagues?|co-?workers?|flatmates?|roommates?|housemates?|cousins?|aunt|uncle|niece|nephew|"
    r"grandma|grandmother|grandpa|grandfather|grandparents|in-laws|family"
)
RELATION_SUBJECT = re.compile(
    rf"^\W*(?i:(?:{OPENERS}|oh|btw|fyi|and|but|guess what)\W+)*(?i:my|our)\s+"
    r"(?i:(?:best|oldest|youngest|older|younger|little|big|baby|twin)\s+)*"
    rf"(?P<relation>(?i:{RELATIONS}))\b(?:,?\s+(?P<name>[A-Z][\w-]+))?"
)
USER_PRONOUN = re.compile(
    r"\b(i|i'm|i've|i'd|i'll|me|myself|we|we're|we've|we'll|us|ich|mich|mir|wir|uns)\b", re.I
)
# Something the user tells about, as the subject a sentence opens with: "Joaquim charges 50 euros an
# hour now", "The Berlin trip got moved to the 19th", "The Elm Street pharmacy closes at 8 these
# days". Its words run up to the first word that reads as a verb; a pronoun or a word that only
# leads in ("It", "There", "So") opens no subject.
SUBJECT_LEADS = re.compile(r"^(?:the|a|an|this|that|these|those|his|her|their)$", re.I)
NO_SUBJECT = re.compile(
    r"^(?:i|i'm|i've|i'd|i'll|me|my|we|we're|we've|us|our|you|your|he|she|it|it's|they|there|"
    r"here|this|that|what|who|which|so|well|ok|okay|yes|no|oh|btw|fyi|just|also|and|but)$",
    re.I,
)
VERBISH = re.compile(
    r"^(?:is|are|was|were|isn't|aren't|wasn't|weren't|has|have|had|hasn't|haven't|got|gets|will|"
    r"won't|would|can|can't|could|does|doesn't|did|didn't|now|just|still|no|never|finally|also|"
    r"always|usually|only|then|already|went|came|left|ran|made|took|gave|said|told|became|began|"
    r"broke|brought|bought|fell|found|held|kept|knew|lost|met|paid|put|sent|sold|spent|stood|won|"
    r"[a-z]+ed|[a-z]+(?<![su])s)$"
)
# A change that adds to what was true replaces nothing: "Wanjiru now sells coffee as well".
ADDS = re.compile(r"\b(?:as well|too|also|in addition|on top of that|besides)\b", re.I)
MAX_SUBJECT_WORDS = 4
OWNED = re.compile(r"^(?:my|our)$", re.I)
# Words that name nobody in particular: "Dr Osei" and "Dr Patel" share no subject.
WEAK_SUBJECT_WORDS = STOP_WORDS | {
    "dr",
    "mr",
    "mrs",
    "ms",
    "miss",
    "prof",
    "st",
    "new",
    "old",
    "urgent",
    "note",
}
_TOKEN = re.compile(r"[\w'’-]+")


@dataclass(frozen=True)
class Subject:
    """What a sentence opens with: its words (lower case), those of them written as names ("Tom",
    "Berlin", "Uncle Farid"), and whether the user's "my" or "our" opened it."""

    words: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    owned: bool = False

    def __bool__(self) -> bool:
        return bool(self.words)


def opening_subject(sentence: str, told: bool = False) -> Subject:
    """The subject a sentence opens with, without a possessive "'s" ("Joaquim's rate is …":
    joaquim, rate); empty when it opens with a pronoun or no verb follows within
    MAX_SUBJECT_WORDS. `told`: a subject of the user's may open it too ("My uncle Farid runs a
    coffee shop": uncle, farid, owned), as an earlier statement the change is compared with."""
    tokens = _TOKEN.findall(sentence)
    owned = False
    while tokens and (SUBJECT_LEADS.match(tokens[0]) or (told and OWNED.match(tokens[0]))):
        owned = owned or bool(OWNED.match(tokens[0]))
        tokens = tokens[1:]
    if not tokens or NO_SUBJECT.match(tokens[0]) or FIRST_PERSON.match(tokens[0]):
        return Subject()
    said = []
    for token in tokens[: MAX_SUBJECT_WORDS + 1]:
        if VERBISH.match(token):
            break
        said.append(token)
    else:
        return Subject()
    words, names = set(), set()
    for token in said:
        word = re.sub(r"['’]s$", "", token).strip("'’").lower()
        if word and word not in WEAK_SUBJECT_WORDS:
            words.add(word)
            if token[0].isupper():
                names.add(word)
    return Subject(frozenset(words), frozenset(names), owned)


def changed_subject(text: str) -> Subject:
    """What a statement tells a change of when it is neither about the user nor news of someone by
    name or relation (`changed_person`): the subject of its first sentence that says a change and
    does not speak of the user ("The Berlin trip got moved to the 19th": berlin, trip)."""
    if never_an_answer(text) or len(subject_of(text).split()) < MIN_SUBJECT_WORDS:
        return Subject()
    for sentence in split_sentences(text):
        if (
            says_change(sentence)
            and not ADDS.search(sentence)
            and not USER_PRONOUN.search(sentence)
            and not FIRST_PERSON.search(sentence)
        ) and (subject := opening_subject(sentence)):
            return subject
    return Subject()


def told_subject(text: str) -> Subject:
    """The subject a statement about someone or something else opens with, change or not."""
    if never_an_answer(text):
        return Subject()
    said = next(iter(split_sentences(text)), "")
    return (
        opening_subject(said) if said and not (USER_PRONOUN.search(said) or ADDS.search(said)) else Subject()
    )


def same_subject(subject: Subject, text: str) -> bool:
    """Whether a statement opens one of its sentences with the same subject: a word in common ("The
    pharmacy on Elm Street closes at 6" and "The Elm Street pharmacy …"), every name the change
    gives ("Tom's phone number changed" is not of "The phone number is …"), and, when the user's
    "my" opened it, a name in common ("My uncle Farid runs …" and "Uncle Farid's place …", never
    "My phone number is …" and Tom's, nor "My gym" and "The gym changed its hours")."""
    for sentence in split_sentences(text):
        earlier = opening_subject(sentence, told=True)
        if (
            subject.words & earlier.words
            and subject.names <= earlier.words
            and (not earlier.owned or subject.names & earlier.words)
        ):
            return True
    return False


WHEN = re.compile(PLAN_TIME)
# A plan moved to another time: "got moved to the 21st", "pushed back to March", "rescheduled for 9:30".
MOVED_TO_A_TIME = re.compile(
    rf"\b(?i:moved|pushed(?: \w+)? back|brought(?: \w+)? forward|postponed|rescheduled|delayed|"
    rf"put(?: \w+)? back|put off|shifted|bumped)\b[^.!?]*?"
    rf"\b(?i:to|till|until|for|on)\s+(?i:the\s+)?{PLAN_TIME}"
)


def moves_plan_of(subject: Subject, new_text: str, earlier_text: str) -> bool:
    """Whether a plan moved to another time ("The Tokyo trip got moved to the 21st") is one the user
    told in the first person ("I'm flying to Tokyo on the 14th"), which opens with no subject of its
    own: the earlier statement gives a time and every name the change's subject gives."""
    return bool(
        subject.names
        and MOVED_TO_A_TIME.search(new_text)
        and FIRST_PERSON.search(earlier_text)
        and WHEN.search(earlier_text)
        and subject.names <= {word.lower() for word in _TOKEN.findall(earlier_text)}
    )


# Channels whose turns are not the user's statements: schedule firings and delegated results.
NOT_STATEMENTS = frozenset({"cron", "router"})
MIN_SUBJECT_WORDS = 3


@dataclass(frozen=True)
class Successor:
    """The newest statement that updated an earlier one."""

    session_id: int
    text: str
    channel: str
    sender: str | None
    at: datetime


def announces_change(text: str) -> bool:
    """A statement (not a question) that says something is now different, about something: with
    the change words taken out, at least MIN_SUBJECT_WORDS are left ("back now" is small talk)."""
    if never_an_answer(text) or len(subject_of(text).split()) < MIN_SUBJECT_WORDS:
        return False
    return any(
        says_change(s)
        and (
            FIRST_PERSON.search(s)
            or OPENS_WITH_CHANGE.match(s)
            or NAMED_CHANGE.match(s)
            or CORRECTION.search(s)
        )
        for s in split_sentences(text)
    )


def _news_of(sentence: str) -> str | None:
    """Whom a sentence is news of when someone close to the user is its subject and the user is not
    in it: their name when it gives one ("My best friend Jess …": Jess), else the relation."""
    m = RELATION_SUBJECT.match(sentence)
    if m is None or USER_PRONOUN.search(sentence, m.end()):
        return None
    return m.group("name") or m.group("relation")


def changed_person(text: str) -> str | None:
    """Whom a change is about when the user tells it of someone else, by name ("Anna moved to
    Bristol": Anna) or as their subject ("My parents just moved to Malaga": parents); None when it
    is about the user."""
    changes = [s for s in split_sentences(text) if says_change(s)]
    if any(
        (FIRST_PERSON.search(s) or OPENS_WITH_CHANGE.match(s) or CORRECTION.search(s)) and not _news_of(s)
        for s in changes
    ):
        return None
    for sentence in split_sentences(text):
        if named := NAMED_CHANGE.match(sentence):
            return named.group(1)
        if sentence in changes and (person := _news_of(sentence)):
            return person
    return None


# A return to what was true before a change, in other words than the first time: "I'm living in
# Lisbon again", "Back in Lisbon for good", "I moved back to Lisbon". Said of a visit ("I was in
# Lisbon again for a wedding", "went to the gym again") it is an event, not a state, and of a plan
# put off ("we pushed the trip back to the 21st") a new date: neither returns to anything.
RETURN = re.compile(r"\b(again|once more|back (in|at|to|with|on|home|together)|returned to)\b", re.I)
VISIT = re.compile(r"\b(was|were|went|visited|spent|stayed)\b", re.I)
PUT_OFF = re.compile(r"\b(?:(?:pushed|put|set|bumped|brought)(?: \w+){0,4}|moved(?: \w+){1,4}) back\b", re.I)
RETURN_OPENS = re.compile(rf"^\W*(?:{OPENERS}\s+)?(?:back|again)\b", re.I)


def _value_words(text: str) -> set[str]:
    """The stemmed content words of a statement that are not its attribute's nor a return's: what
    it says the value is ("Lisbon" in "I live in Lisbon")."""
    for _, pattern in ATTRIBUTES:
        text = pattern.sub(" ", text)
    return set(tokenize([RETURN.sub(" ", text)], ids=False)[0])


def returned_to(
    text: str,
    superseded: Sequence[str],
    encode: Callable[[list[str]], np.ndarray],
    min_cosine: float,
    same_attribute_min_cosine: float,
) -> int | None:
    """Which statement a change had superseded the user now returns to, in other words ("I'm living
    in Lisbon again" after "I live in Lisbon", then "I moved to Porto"): a sentence of theirs with a
    return word, not of a visit, naming a value of the statement's and close to it in meaning (as
    `superseded_statement` compares, leniently when both name an attribute). The closest one's index
    in `superseded`."""
    if never_an_answer(text):
        return None
    sentences = [
        s
        for s in split_sentences(text)
        if RETURN.search(s)
        and not VISIT.search(s)
        and not PUT_OFF.search(s)
        and (FIRST_PERSON.search(s) or RETURN_OPENS.match(s))
        and _news_of(s) is None
    ]
    values = [_value_words(earlier) for earlier in superseded] if sentences else []
    pairs = [
        (sentence, n)
        for sentence, named in ((s, _value_words(s)) for s in sentences)
        for n, said in enumerate(values)
        if named & said
    ]
    if not pairs:
        return None
    vectors = encode([said for sentence, n in pairs for said in (sentence, superseded[n])])
    best, best_cosine = None, -1.0
    for i, (sentence, n) in enumerate(pairs):
        cosine = float(vectors[2 * i] @ vectors[2 * i + 1])
        shared = attributes_of(sentence) & attributes_of(superseded[n])
        if cosine >= (same_attribute_min_cosine if shared else min_cosine) and cosine > best_cosine:
            best, best_cosine = n, cosine
    return best


# A change that ends something rather than replacing it ("I quit Google last week", "Sold the
# Golf"): the earlier statement names the same thing ("I work at Google as a data engineer"), and the
# two share little else (cosine 0.34, under the strict threshold), so a name in common counts as an
# attribute in common.
ENDS = re.compile(
    r"\b(quit|quitting|resigned|sold|cancell?ed|stopped(?! by)|gave up|given up|no longer|got rid of|"
    r"ditched|done with|dropped(?! (?:by|off))|broke up with|split (up )?with"
    # leaving a name for another ("I left Google and joined Stripe"), not a place on a trip ("Left
    # Paris this morning, now in Lyon") nor someone's place ("left Sam's party and started home")
    r"|left (?-i:[A-Z])[\w&-]*+(?!['’])(?: [\w'’-]+){0,4}? (?:and|to) (?:join|joined|start|started|work)"
    r")\b",
    re.I,
)
_NAME = re.compile(r"\b(?!I\b|I['’])[A-Z][\w&'’-]+")

# "I left Google last month": leaving a name, with nothing said of what came next. "Left" is in far
# more sentences that end nothing ("I left my keys at work", "Left Paris this morning"), so such a
# statement ends only one that says the user works at or for that name (`works_at`).
LEFT_NAME = re.compile(
    r"\b(?:I|we)(?:['’]ve| have)?(?: just| \w+ly)? left (?P<name>(?-i:[A-Z])[\w&-]*+)(?!['’])", re.I
)
# Where a statement says the user works: "I work at Google", "I'm a senior engineer at Google",
# "My employer is Google"; not "I work in Paris", nor a colleague's job ("My boss Ben works at …").
_AT_NAME = r"\b(?:at|for|with|by|is)\s+(?:\w+\s+)?{name}\b"


def _names(sentence: str) -> set[str]:
    """The capitalized words of a sentence past its first word ("VW", "Golf"): names, in lower case."""
    sentence = sentence.strip()
    return {m.group().lower() for m in _NAME.finditer(sentence) if m.start() > 0}


def ended_names(text: str) -> set[str]:
    """The names in the sentences of a statement that end something ("I quit Google": google)."""
    return {name for s in split_sentences(text) if ENDS.search(s) for name in _names(s)}


def left_names(text: str) -> set[str]:
    """The names a statement says the user left ("I left Google last month": google)."""
    return {m["name"].lower() for s in split_sentences(text) for m in LEFT_NAME.finditer(s)}


def works_at(names: set[str], text: str) -> bool:
    """Whether a statement says the user works at or for one of `names` (in lower case)."""
    return any(
        "work" in attributes_of(s)
        and RELATION_SUBJECT.match(s) is None
        and any(re.search(_AT_NAME.format(name=re.escape(name)), s, re.I) for name in names)
        for s in split_sentences(text)
    )


def names_in(text: str) -> set[str]:
    """Every name of a statement's sentences."""
    return {name for s in split_sentences(text) for name in _names(s)}


def corrects(text: str) -> bool:
    """Whether a statement corrects what the user said ("Sorry, I meant Sunday")."""
    return any(CORRECTION.search(s) for s in split_sentences(text))


# The words a correction opens with, which say nothing of what it is about: with "Actually",
# "Actually I moved to York last month" was 0.196 from "I live in Leeds and work at Arup" and
# superseded nothing, where "I moved to York last month" was 0.200 and did.
CORRECTION_LEAD = re.compile(
    r"^\W*(?:(?:oops|sorry|correction|scratch that|my mistake|actually)\b\W*)+", re.IGNORECASE
)


def subject_of(text: str) -> str:
    """What a statement is about, without the words that announce a change or open a correction:
    what to search for and compare with, so two unrelated updates ("switched to Monzo", "switched to
    cortados") do not look alike for sharing "switched"."""
    return " ".join(CHANGE.sub(" ", CORRECTION_LEAD.sub("", text)).split())


class Memory(Protocol):
    """What detection reads of a recall hit."""

    text: str
    sources: list[int]
    fact_id: int | None
    channel: str | None
    sender: str | None
    updated_by: int | None


def superseded_statement(
    new_text: str,
    new_session_id: int,
    found: Sequence[Memory],
    is_owner: Callable[[str, str | None], bool],
    encode: Callable[[list[str]], np.ndarray],
    min_cosine: float,
    same_attribute_min_cosine: float,
    said_by: tuple[str, str | None] | None = None,
    same_subject_min_cosine: float | None = None,
    restatement: bool = False,
) -> tuple[list[int], float] | None:
    """Which earlier owner statement a turn announcing a change supersedes: among what recall
    `found` for it, the one closest in meaning (unit vectors from `encode`) that reaches
    `same_attribute_min_cosine` when both name an attribute in common, `min_cosine` otherwise.
    Only a statement about the owner can be superseded (a fact, or the owner's turn in the first
    person or naming an attribute): "brb, someone's at the door" is not; a change told of someone
    by name supersedes only a statement naming them, and one about the user never supersedes such
    news. `said_by`, the new statement's (channel, sender): on its channel, a turn another sender
    said is another person's, whatever their changes (two owners in one chat, as LoCoMo's speakers:
    linking either's statements by the other's changes cost R@10 2.0 on its tune half), while on
    another channel the owner's own statements go by other ids. A change of something else the
    user tells about (`changed_subject`: "The Berlin trip got moved to the 19th") supersedes only an
    earlier owner statement opening with the same subject, at `same_subject_min_cosine`; with
    `restatement`, so may a statement that says no change ("Rui's lessons are 45 euros an hour"); a
    plan it moves to another time may be one the user told in the first person (`moves_plan_of`).
    A change of the user's own that ends something counts a name in common as an attribute in
    common (`ended_names`: "I quit Google", "I work at Google"); one that only says the user left a
    name ("I left Google") supersedes only a statement that they work there. Returns its session ids and the
    cosine."""
    subject, ended = Subject(), set()
    if same_subject_min_cosine is not None and not announces_change(new_text):
        subject = told_subject(new_text) if restatement else changed_subject(new_text)
    earlier = [
        m
        for m in found
        if m.sources
        and max(m.sources) < new_session_id
        and m.updated_by is None
        and m.channel not in NOT_STATEMENTS
        and (said_by is None or m.fact_id is not None or m.channel != said_by[0] or m.sender == said_by[1])
        and (
            m.fact_id is not None
            or (
                is_owner(m.channel or "", m.sender)
                and (
                    FIRST_PERSON.search(m.text)
                    or attributes_of(m.text)
                    or corrects(new_text)
                    or (subject and same_subject(subject, m.text))
                )
            )
        )
    ]
    if subject:
        earlier = [
            m for m in earlier if same_subject(subject, m.text) or moves_plan_of(subject, new_text, m.text)
        ]
    elif person := changed_person(new_text):
        earlier = [m for m in earlier if re.search(rf"\b{re.escape(person)}\b", m.text, re.IGNORECASE)]
    else:  # and the user's own change never supersedes news of someone else ("Tom's at Spotify now")
        earlier = [m for m in earlier if changed_person(m.text) is None]
        ended = ended_names(new_text)
        if not announces_change(new_text) and (left := left_names(new_text)):
            earlier = [m for m in earlier if works_at(left, m.text)]  # "I left Google": the job ends
            ended = left
    if not earlier:
        return None
    vectors = encode([subject_of(new_text), *(subject_of(m.text) for m in earlier)])
    cosines = vectors[1:] @ vectors[0]
    named = attributes_of(new_text)
    needed = [
        same_subject_min_cosine
        if subject
        else same_attribute_min_cosine
        if named & attributes_of(m.text) or ended & names_in(m.text)
        else min_cosine
        for m in earlier
    ]
    reached = [i for i in range(len(earlier)) if cosines[i] >= needed[i]]
    if not reached:
        return None
    best = max(reached, key=lambda i: cosines[i])
    return list(earlier[best].sources), float(cosines[best])


# A fact the offline extraction drew from one sentence may join statements of the user's ("I live in
# Lisbon and my locker code is 4471"): a change of one ("I moved to Porto") closed the whole fact,
# and the locker code left the bulletin as "no longer current". Joined by "and", "but" or ";" and
# each opening with the user ("I", "we", "my …", "our …") followed by a verb, they are told apart.
_JOINED_STATEMENT = re.compile(
    r"\s*(?:,?\s+(?:and|but)|;(?:\s*(?:and|but))?)\s+(?=(?:I|I['’](?:m|ve|d|ll)|(?i:we|we['’](?:re|ve)|my|our))\b)"
)
_USER_OPENS = re.compile(r"^(?:I|I['’](?:m|ve|d|ll)|(?i:we|we['’](?:re|ve)))$")
_USER_OWNS = re.compile(r"^(?i:my|our)$")
MIN_STATEMENT_WORDS = 3


def statements_of(text: str) -> list[str]:
    """The user's statements a fact's text joins, each as said; the text alone when it joins none
    (a part without a verb of its own: "My sister and I live in Paris")."""
    parts = [part.strip(" ,;") for part in _JOINED_STATEMENT.split(text.strip())]
    if len(parts) < 2 or not all(_states(part) for part in parts):
        return [text]
    return parts


def _states(part: str) -> bool:
    """Whether a part is a statement of the user's: "I" or "we" and two more words ("I'm" and
    one), or "my"/"our" and a subject of at most MAX_SUBJECT_WORDS words followed by a verb ("my
    locker code is 4471")."""
    tokens = _TOKEN.findall(part)
    if not tokens:
        return False
    if _USER_OPENS.match(tokens[0]):  # "I'm vegetarian": the verb is in the first word
        return len(tokens) >= MIN_STATEMENT_WORDS - bool(re.search("['’]", tokens[0]))
    return (
        len(tokens) >= MIN_STATEMENT_WORDS
        and bool(_USER_OWNS.match(tokens[0]))
        and any(VERBISH.match(token) for token in tokens[2 : MAX_SUBJECT_WORDS + 2])
    )


def facts_about(
    encode: Callable[[list[str]], np.ndarray], change: str, drawn_together: list[str], margin: float
) -> set[str]:
    """Of facts one statement yielded, those a change is about: all of one alone; of several, those
    whose cosine to the change's subject (unit vectors from `encode`) is within `margin` of the
    nearest."""
    if len(drawn_together) <= 1:
        return set(drawn_together)
    vectors = encode([subject_of(change), *(subject_of(text) for text in drawn_together)])
    cosines = vectors[1:] @ vectors[0]
    return {
        text for text, cosine in zip(drawn_together, cosines, strict=True) if cosine >= cosines.max() - margin
    }


def newest_successors(
    links: list[tuple[int, int, str, str, str | None, datetime]],
) -> dict[int, Successor]:
    """For each superseded turn, the newest statement in its chain of updates (Lisbon → Porto →
    Berlin: Lisbon's successor is Berlin)."""
    direct = {old: Successor(new, text, channel, sender, at) for old, new, text, channel, sender, at in links}
    return {old: newest_successor(successor, direct) for old, successor in direct.items()}


def newest_successor(successor: Successor, updated: dict[int, Successor]) -> Successor:
    """The end of `successor`'s chain of updates, where `updated` maps a turn to a statement that
    updated it (a cycle stops where it closes)."""
    seen = set()
    while successor.session_id in updated and successor.session_id not in seen:
        seen.add(successor.session_id)
        successor = updated[successor.session_id]
    return successor


class Ranked(Memory, Protocol):
    """A recall hit as `co_recalled_updates` reorders it."""

    score: float
    at: datetime | None


def co_recalled_updates(
    hits: Sequence[Ranked],
    k: int,
    is_owner: Callable[[str, str | None], bool],
    encode: Callable[[list[str]], np.ndarray],
    min_cosine: float,
    same_attribute_min_cosine: float,
    asked: frozenset[str],
    asked_attribute_min_cosine: float,
    same_subject_min_cosine: float | None = None,
) -> list[tuple[Ranked, Ranked]]:
    """Updates the write-time check missed, seen at query time: a statement announcing a change
    ("My doctor put me on cetirizine instead") found by the same question as an earlier statement of
    the owner ranked above it in the top k ("I take loratadine for hay fever"). The question is the
    subject they share that the change's own search could not see, so they must only be close in
    meaning at the (lower) thresholds given; when the question names an attribute (`asked`, from
    `attributes_of`) that both name ("what's my usual coffee order?": "My usual order is a flat
    white", "I switched to oat cortados"), the question has said what they share, and only
    `asked_attribute_min_cosine` is needed, among those first. Either may be a fact drawn from one
    statement (a fact is the owner's). `hits` are best first; returns (newer, older) pairs, at most
    one per change, none for a memory already updated."""
    pairs = []
    claimed: set[int] = set()
    for rank, new in enumerate(hits[:k]):
        if (
            len(new.sources) != 1
            or new.at is None
            or new.updated_by is not None
            or new.channel in NOT_STATEMENTS
            or (new.fact_id is None and not is_owner(new.channel or "", new.sender))
        ):
            continue
        changes = announces_change(new.text) or (
            same_subject_min_cosine is not None and changed_subject(new.text)
        )
        if not changes and (same_subject_min_cosine is None or not told_subject(new.text)):
            continue
        earlier = [h for h in hits[:rank] if id(h) not in claimed and h.at is not None and h.at < new.at]
        shared = asked & attributes_of(new.text)
        on_asked = [h for h in earlier if shared & attributes_of(h.text)]
        if found := (
            on_asked
            and superseded_statement(
                new.text,
                new.sources[0],
                on_asked,
                is_owner,
                encode,
                asked_attribute_min_cosine,
                asked_attribute_min_cosine,
            )
        ) or superseded_statement(
            new.text,
            new.sources[0],
            earlier,
            is_owner,
            encode,
            min_cosine,
            same_attribute_min_cosine,
            same_subject_min_cosine=same_subject_min_cosine,
            restatement=not changes,
        ):
            old = next(h for h in earlier if list(h.sources) == found[0])
            claimed.add(id(old))
            pairs.append((new, old))
    return pairs
