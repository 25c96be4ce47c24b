"""What a message says, for memory and publish alike: the user's own words (code and quotes left
out), its sentences, and the normal form that dedupe and matching compare.

One module, so fact extraction, sentence vectors, thread tracking and decision dedupe agree on
what the user wrote, where a sentence ends and when two texts say the same words.

Sentences: a boundary is end punctuation followed by whitespace, except after a title or Latin
abbreviation (Dr., e.g.), an initial (the "R." of "J. R. R. Tolkien"), or a word that ends
sentences only sometimes (etc., a.m., Jr.) when the next word is not capitalized. Decimals (3.5)
never split: no whitespace follows their point. `at_newlines` makes every line end a boundary too,
for text where lines are separate statements (chat lines, tracked decisions).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

_TICKS = re.compile(r"`{3,}")
_TILDE_FENCE = re.compile(r"[ \t]*~{3,}")


def own_text(text: str) -> str:
    """The part of a message the user wrote: without code and without `>` quoted lines, since pasted
    or quoted text is not the user stating, deciding or closing anything (DESIGN.md rule 2).

    Code is what chat apps render as code, from a run of three or more backticks anywhere in a line
    to the next such run, and a Markdown `~~~` fence from its line to the next `~~~` line. A block
    left open runs to the end of the text, as in Markdown: what follows an opening fence is pasted,
    and taking a paste for the user's own words costs more than missing a sentence after a stray
    fence. Lines that held only code or a quote go; text beside inline code stays on its line."""
    kept: list[str] = []
    closer = ""  # what ends the open code block: "```" or "~~~"; "" outside code
    for line in text.splitlines():
        if closer == "~~~":
            if _TILDE_FENCE.match(line):
                closer = ""
            continue
        if not closer and line.lstrip().startswith(">"):
            continue
        if not closer and _TILDE_FENCE.match(line):
            closer = "~~~"
            continue
        pieces = _TICKS.split(line)  # pieces alternate between said and code, from the line's start
        if len(pieces) == 1 and not closer:
            kept.append(line)
            continue
        said = " ".join(pieces[1 if closer else 0 :: 2])
        if len(pieces) % 2 == 0:  # an odd number of runs: the line ends on the other side
            closer = "" if closer else "```"
        if said.strip():
            kept.append(said)
    return "\n".join(kept)


# Never the end of a sentence: what follows belongs to them (lowercase, without the final period).
_NEVER = frozenset(
    "dr mr mrs ms mx prof st mt rev sgt capt col gen lt hon e.g i.e cf vs approx z.b d.h bzw ca vgl".split()
)
# The end of a sentence only when the next word starts with a capital letter; dotted ones such as
# "U.S." count too.
_SOMETIMES = frozenset("etc jr sr a.m p.m inc ltd co usw".split())
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")
_BOUNDARY = re.compile(r"(?<=[.!?])\s+")
_LINE = re.compile(r"[^\n]+")
_LAST_WORD = re.compile(r"[^\s(\[\"“'‘]+$")


def _ends_sentence(before: str, after: str) -> bool:
    if not before.endswith("."):
        return True
    word = _LAST_WORD.search(before)
    raw = word.group(0).rstrip(".") if word else ""
    token = raw.lower()
    if token in _NEVER or (len(raw) == 1 and raw.isupper()):  # a title, or an initial
        return False
    if token in _SOMETIMES or _DOTTED.fullmatch(token):
        return after[:1].isupper()
    return True


def sentence_spans(text: str, at_newlines: bool = False) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text` without its surrounding whitespace, empty ones
    dropped: offsets for callers that look at what lies around a match."""
    blocks = [m.span() for m in _LINE.finditer(text)] if at_newlines else [(0, len(text))]
    spans: list[tuple[int, int]] = []
    for lo, hi in blocks:
        start = lo
        for gap in _BOUNDARY.finditer(text, lo, hi):
            if _ends_sentence(text[start : gap.start()], text[gap.end() : hi]):
                spans.append((start, gap.start()))
                start = gap.end()
        spans.append((start, hi))
    stripped = []
    for start, end in spans:
        piece = text[start:end]
        if piece.strip():
            start += len(piece) - len(piece.lstrip())
            stripped.append((start, start + len(piece.strip())))
    return stripped


def split_sentences(text: str, at_newlines: bool = False) -> list[str]:
    """The sentences of `text`, stripped, empty ones dropped; `at_newlines` also splits at line ends."""
    return [text[start:end] for start, end in sentence_spans(text, at_newlines)]


# A name written as capitalised words run together ("PureGym", "MapMyRun", "McDonald's"; not "iPhone"
# nor "DuckDB"): a reader sees the words in it, a search that lower-cases first sees one unknown word,
# and "which gym do I go to?" missed "I go to PureGym".
_COMPOUND = re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b")
_CAPITALISED = re.compile(r"[A-Z][a-z]+")
COMPOUND_HINT = "[a-z][A-Z]"  # in every such name: a cheap screen for many texts (RE2 and Python alike)


def with_compound_words(text: str) -> str:
    """The text with the words of each run-together name after it ("PureGym Pure Gym"), for keyword
    search: the name itself still matches, and so does each of its words."""
    return _COMPOUND.sub(lambda m: f"{m[0]} {' '.join(_CAPITALISED.findall(m[0]))}", text)


def split_compounds(text: str, known: Callable[[str], bool]) -> str:
    """The text with each run-together name written as its words ("Pure Gym"), for an embedder,
    when `known` takes each of them and not the name: one its vocabulary holds whole ("YouTube")
    stays, and so does one with a word it lacks ("LeBron": "Bron" gives it nothing "##bron" did not)."""

    def read(name: re.Match[str]) -> str:
        words = _CAPITALISED.findall(name[0])
        return " ".join(words) if not known(name[0]) and all(map(known, words)) else name[0]

    return _COMPOUND.sub(read, text)


# A sentence that asks: it ends with a question mark, or asks in words without one. A question word
# then its verb ("what's my address", "which city do I live in", "how many kids does Tom have"; not
# "What a day." nor "How I met my wife is a long story."), an auxiliary then its subject ("do I eat
# meat", "is my passport valid"; not "Will is my brother." nor "May 3rd is my birthday."), or a
# request for what memory holds ("remind me what my locker code is", "tell me where I live", "need my
# locker code pls", "I forgot when the plumber is coming"; not "Remind me to call mum at 5" nor
# "Tell me when you're done"). A sentence that ends in "!" exclaims ("How cool is that!").
_LEAD = r"(?:\W*(?:hey|hi|ok|okay|so|and|but|also|btw|oh|um|uh|well|please|pls|plz|sorry)\b)*\W*"
_WH = r"(?:what|when|where|who|whom|whose|which|how|why)"
_AUX = (
    r"(?:do|does|did|is|are|am|was|were|can|could|should|would|will|has|have|may|might|must|shall)"
    r"(?:n['’]?t)?"
)
_PERSON = r"(?:i|you|u|we|they|he|she)"
# Between "what", "which", "how" or "whose" and the verb, up to three lowercase words that are no
# pronoun or article ("what time's", "how many kids does"). "When", "where", "who" and "why" take
# the verb at once: "When dad was ill, I moved home." states.
_BETWEEN = (
    r"(?:\s+(?!(?:i|you|we|they|he|she|it|me|my|your|our|their|his|her|its|a|an|the|this|that|there)\b)"
    r"(?-i:[a-z]+)){0,3}"
)
_ASKING = (
    r"(?!which (?:is|was) why|what(?:['’]s| is) (?:more|worse)\b)"
    rf"(?:(?:what|which|how|whose){_BETWEEN}|(?:when|where|who|whom|why)(?: else| exactly)?)"
    rf"(?:['’](?:s|re|d|ve|ll)|\s+{_AUX})\b"
    rf"|{_AUX}\s+{_PERSON}\b"
    r"|(?:is|are|does|can|could|will|would)(?:n['’]?t)?\s+(?:my|our|your|his|her|their|the|this|that|these|those)\b"
    r"|(?:is|are|was|were|does|did|has|can|could|will|would)(?:n['’]?t)?\s+"
    r"(?:it|there|any(?:one|body|thing)|some(?:one|body|thing))\b"
    r"|(?:remind me(?: again)?(?: of)?|tell me(?: again)?(?: about)?)\s+"
    rf"(?:(?:my|our|the|what|where|who|whom|whose|which|how|why|whether)\b|(?:when|if)\b(?!\s+(?:{_PERSON}|it)\b))"
    r"|need (?:my|our|the)\b|(?:i['’]d like|(?:i )?(?:need|want|would like)|wanna) to know\b"
    r"|(?:i )?(?:forgot|forget|can['’]?t remember|cannot remember|don['’]?t remember|do not remember"
    rf"|(?:was )?wonder(?:ing)?)\s+{_WH}\b|any idea\s+{_WH}\b"
)
# The words those forms open with: a sentence that opens otherwise fails at once (recall asks this of
# every candidate turn; 1.3 µs a statement instead of 3-5).
_OPENS = rf"(?=(?:{_WH}|{_AUX}|remind|tell|need|i|wanna|any|forgot|forget|cannot|don|wonder(?:ing)?)\b)"
# An auxiliary not followed by a person that ends in a full stop states ("Does the trick.", "Is what
# it is."); "do I eat meat." still asks.
_STATES_WITH_A_STOP = rf"(?!{_AUX}\s+(?!{_PERSON}\b).*\.\W*$)"
_IN_WORDS = rf"^{_LEAD}{_OPENS}(?!.*(?<!\?)!\W*$){_STATES_WITH_A_STOP}(?:{_ASKING})"
ASKS_IN_WORDS = re.compile(_IN_WORDS, re.I | re.S)
QUESTION = re.compile(rf"\?\s*$|{_IN_WORDS}", re.I | re.S)
# A question about everything known of the owner rather than about one thing: recall lists the most
# important facts and the owner's newest statements for it, current ones only.
_ASKS_WHAT_IS_KNOWN = re.compile(
    r"\b(?:what (?:else )?(?:do|did|have) you (?:know|remember|learned|learnt) about me\b"
    r"|what have i told you(?: about (?:me|myself))?\W*$|what do you have on me\b"
    r"|tell me (?:about myself|what you know about me)\b)",
    re.I,
)


def asks_what_is_known(text: str) -> bool:
    return _ASKS_WHAT_IS_KNOWN.search(text) is not None


# A request to forget restates what it asks to drop ("Please forget that my sister lives in Vienna"):
# like a question, it is never an answer nor a fact. Not "Don't forget …", which asks to remember.
# Hiding it from the model and the published files takes a stricter pattern, below.
_ASKED = r"^\W*(?:(?:please|pls|can you|could you|would you)\s+)?"
_NOT_REMEMBERING = r"|stop remembering|don['’]?t remember|do not remember)\b"
FORGET_REQUEST_PATTERN = (
    rf"{_ASKED}(?:(?:forget|unlearn) (?:that|about|what|everything|all|my|our|the|this){_NOT_REMEMBERING}"
)
FORGET_REQUEST = re.compile(FORGET_REQUEST_PATTERN, re.I | re.A)


# "Forget that, we're at Luigi's on Friday": "that" is what was just said, and what follows the
# comma, dash, full stop or line break is news, a correction like "scratch that, …" (memory/
# updates.says_change), not a request that restates what to drop. It had been hidden, never recalled
# and never a fact: the news was lost. Not news: "please" or "thanks" alone after it, nor anything
# that speaks of keeping it private ("Forget that, it's private", "… I don't want that remembered"),
# which stays a request to forget, hidden. Three patterns DuckDB runs too (RE2: no lookaround), so
# session.FORGET_REQUESTS hides exactly what `only_asks_to_forget` says.
_RETRACTED = (
    _ASKED + r"(?:forget|unlearn|scratch|ignore|disregard) "
    r"(?:that|this|it|what i (?:just )?(?:said|wrote))"
)
RETRACTION_PATTERN = _RETRACTED + r"(?:\s*[,;:–—.!-][\s,;:–—.!-]*|[ \t]*\n\s*)\w"
POLITE_RETRACTION_PATTERN = (
    _RETRACTED + r"[\s,;:–—.!-]*(?:(?:please|pls|thanks|thank you|ok|okay)\b)?[\s.!?…]*$"
)
KEEP_IT_PRIVATE_PATTERN = (
    r"\b(?:private|secret|confidential|personal|remember\w*|know|knew|tell|told|anyone|shouldn['’]?t"
    r"|should not|don['’]?t want|do not want|delete|erase)\b"
)
_RETRACTION = re.compile(RETRACTION_PATTERN, re.I | re.A)
_POLITE_RETRACTION = re.compile(POLITE_RETRACTION_PATTERN, re.I | re.A)
_KEEP_IT_PRIVATE = re.compile(KEEP_IT_PRIVATE_PATTERN, re.I | re.A)


def retraction_with_news(text: str) -> bool:
    """Whether a message takes back what was just said and goes on with news."""
    return bool(
        _RETRACTION.search(text) and not _POLITE_RETRACTION.search(text) and not _KEEP_IT_PRIVATE.search(text)
    )


def asks_to_forget(text: str) -> bool:
    return bool(FORGET_REQUEST.match(text)) and not retraction_with_news(text)


# What is hidden from the conversation the model reads and from every published file (session.
# NOT_FORGOTTEN) is stricter: a message that is a request to forget and nothing more, or its news
# was lost with it ("Forget the pasta place, we are having dinner at Luigi's on Friday", "Can you
# forget my last message? The launch moved to March 3"). It opens with "forget that / everything /
# all / what" (or "unlearn" so), "stop remembering" or "don't remember", and is one sentence: no
# sentence end (. ! ? … or a line break) followed by more text, where "Dr. " or "J. " (an
# abbreviation or an initial before a space) and "3.5" or "e.g.," (no space after) end none; and it
# is no retraction with news (above). "Please forget my address, it's 12 Rua X" stays visible: it
# has the shape of "forget my last message, the launch moved", and recall and extraction leave it
# out all the same (asks_to_forget). Run by DuckDB too (RE2): no lookahead, ASCII classes; each
# text parses one way (no backtracking blow-up in Python).
_ABBREVIATION = r"\b(?:[a-z]|dr|mrs?|ms|mx|st|prof|jr|sr|vs|etc|no)\.[ \t]"
HIDDEN_FORGET_REQUEST_PATTERN = (
    rf"{_ASKED}(?:(?:forget|unlearn) (?:that|everything|all|what){_NOT_REMEMBERING}"
    rf"(?:[^.!?…\r\n]|{_ABBREVIATION}|[.!?…]+[^\s.!?…])*"
    r"[.!?…]*\s*$"
)
HIDDEN_FORGET_REQUEST = re.compile(HIDDEN_FORGET_REQUEST_PATTERN, re.I | re.A)


def only_asks_to_forget(text: str) -> bool:
    """A request to forget and nothing more: hidden once answered (session.FORGET_REQUESTS)."""
    return bool(HIDDEN_FORGET_REQUEST.match(text)) and not retraction_with_news(text)


# A message the owner forwarded from someone else opens with this line (connectors/telegram.py): its
# words are that person's, so no fact about the user is drawn from it and it updates nothing they
# said; it is recalled all the same, header and all.
_FORWARDED = re.compile(r"^\[Forwarded from [^\]\n]{1,80}\]\n")


def forwarded_header(origin: str) -> str:
    """The line a forwarded message opens with; the origin's name is one line, without "]"."""
    name = collapse_spaces(origin.replace("]", ")"))[:80] or "someone"
    return f"[Forwarded from {name}]"


def forwarded(text: str) -> bool:
    return bool(_FORWARDED.match(text))


def never_an_answer(text: str) -> bool:
    """A turn recall never offers as a memory and extraction never takes a fact from: a question,
    or a request to forget."""
    return is_question(text) or asks_to_forget(text)


def asks(text: str) -> bool:
    """Whether a message asks anything: one of its sentences is a question (QUESTION)."""
    return any(QUESTION.search(s) for s in split_sentences(text))


def is_question(text: str) -> bool:
    """Whether every sentence of a turn asks (QUESTION) and states nothing before it asks: such a
    turn is never an answer, so recall never offers it as a memory and no fact comes from it."""
    if "?" not in text and not ASKS_IN_WORDS.match(text):  # recall asks this of every candidate
        return False  # without a mark the first sentence must ask in words, and it starts the text
    sentences = split_sentences(text)
    return bool(sentences) and all(QUESTION.search(s) and not stated_part(s) for s in sentences)


# What keeps the part of a question before its comma from stating: a condition or a time to come
# ("If it rains, should I drive?") or a phrase that only leads into the question.
_SUPPOSES = re.compile(
    rf"{_LEAD}(?:if|unless|whether|in case|suppose|supposing|assuming|even if|what if|when|whenever"
    r"|once|until)\b",
    re.I,
)
_LEADS_IN = re.compile(
    r"(?:as i (?:said|mentioned)|like i said|i (?:mean|guess|think|suppose|see|know|agree|wonder)"
    r"|i['’]m (?:curious|sorry|not sure|confused)|i was (?:wondering|thinking)|before i forget"
    r"|while i remember|just curious|out of curiosity|by the way|one more thing)\W*",
    re.I,
)
_SAYS = re.compile(r"\b(?:i|we|my|our|me|us|is|are|was|were|am|has|have|had)\b|\w['’](?:s|re|m|ve|d)\b", re.I)
_LEADING = re.compile(rf"^{_LEAD}", re.I)
_BECAUSE = re.compile(r"^(?:since|because|as|given that|now that|seeing as)\s+(?=(?:i|we|my|our)\b)", re.I)


def stated_part(sentence: str) -> str:
    """What a question states before its comma, or "": "We just moved to 22 Harbour Road, can you
    update my address?" tells the move and "Since I'm allergic to penicillin, which antibiotics are
    safe?" the allergy, which recall and extraction must keep; "By the way, where do I live?" and
    "If it rains, should I drive?" state nothing."""
    if not sentence.rstrip().endswith("?"):
        return ""
    for comma in re.finditer(r",\s*", sentence):
        if not ASKS_IN_WORDS.match(sentence[comma.end() :]):
            continue
        before = _LEADING.sub("", sentence[: comma.start()]).strip()
        if (
            len(before.split()) < 2
            or QUESTION.search(before)
            or _SUPPOSES.match(before)
            or _LEADS_IN.fullmatch(before)
            or not _SAYS.search(before)
        ):
            return ""
        return _BECAUSE.sub("", before, count=1)
    return ""


_CONTRACTIONS = {
    "i'm": "i am",
    "i've": "i have",
    "i'd": "i would",
    "i'll": "i will",
    "don't": "do not",
    "doesn't": "does not",
    "can't": "cannot",
    "won't": "will not",
    "we're": "we are",
    "we've": "we have",
    "it's": "it is",
    "that's": "that is",
    "isn't": "is not",
}
_NON_WORD = re.compile(r"[^\w\s]", re.UNICODE)


def normalize(text: str) -> str:
    """Case-, punctuation- and contraction-insensitive form: two texts that say the same words
    compare equal. Fact hashes are taken of it, so a change here changes stored hashes."""
    text = unicodedata.normalize("NFKC", text).lower().replace("’", "'")
    words = [_CONTRACTIONS.get(w, w) for w in text.split()]
    return " ".join(_NON_WORD.sub(" ", " ".join(words)).split())


def words(text: str) -> list[str]:
    """The words of `text` in normal form."""
    return normalize(text).split()


def collapse_spaces(text: str) -> str:
    """`text` on one line, each run of whitespace one space."""
    return " ".join(text.split())


# How much of a long text a copy names: a delegated task's reply quotes the task's first words
# within this many characters (`first_words`); erasure finds such copies by the same cut.
COPIED_CHARS = 80


def first_words(text: str, limit: int = COPIED_CHARS) -> str:
    """`text` on one line, cut at a word within `limit` characters: how a copy quotes a long text.
    Cut at `limit` instead when the word cut would keep less than half of it ("I https://…" had
    kept "I", and erasure took every pin and reply holding an "i" for a copy)."""
    line = collapse_spaces(text)
    cut = cut_at_word(line, limit)
    return cut if len(cut) * 2 >= min(len(line), limit) else line[:limit]


def cut_at_word(text: str, limit: int) -> str:
    """At most `limit` characters of `text`, cut at the last space before the limit when there is one."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit]


def shorten(text: str, limit: int) -> str:
    """One line of at most `limit` characters, for a listing (an ellipsis says there is more)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
