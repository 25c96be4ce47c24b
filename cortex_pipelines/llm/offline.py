"""The embedded default: no key, no network, deterministic.

It never invents: questions are answered only with the pins they name, the memories recalled into
its context or what `memory_query` returns, delegation goes
through `sessions_spawn`, everything else gets a short acknowledgement or silence.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from cortex_pipelines.llm.base import LLMRequest, LLMResponse, ToolCall, estimate_tokens
from cortex_pipelines.memory.dates import past_days
from cortex_pipelines.memory.fusion import stemmed
from cortex_pipelines.memory.updates import RELATIONS
from cortex_pipelines.proactive import english, schedules
from cortex_pipelines.storage.facts import OP_HARVEST
from cortex_pipelines.text import (
    asks,
    asks_to_forget,
    asks_what_is_known,
    collapse_spaces,
    first_words,
    is_question,
    normalize,
    only_asks_to_forget,
    split_sentences,
    stated_part,
)

_THANKS = re.compile(r"^\s*(thanks|thank you|thx|ok(ay)?|cool|great|perfect|got it|👍)[\s!.]*$", re.I)
_GREETING = re.compile(r"^\s*(good (morning|afternoon|evening)|hi|hello|hey)\b[\s!.,]*", re.I)
_DELEGATE = re.compile(
    r"\b(can|could|would) you\b.*\b(research|look into|find out|compare|investigate|look up)\b"
    r"|^\s*please (research|look into|find out|compare|investigate|look up)\b",
    re.I | re.S,
)
# The offline provider cannot tell which fact a request to forget means: it says how, not "Noted."
_CANNOT_FORGET = (
    'I can\'t forget from a chat message without a model. Find it with `cortex recall "..."`: a fact '
    "(fact N) with `cortex forget FACT_ID` (or `/forget FACT_ID` in `cortex chat`; `cortex unforget` "
    "undoes it), a message that is no fact (messages [N]) with `cortex forget --turn N` (`cortex "
    "unforget --turn N` undoes it), or for good with `cortex erase --turn N`, which cannot be undone."
)
_REMEMBER = re.compile(r"\b(remember|don't forget|note that|keep in mind)\b", re.I)
# A stranger's words never become the owner's memory, so they are not promised that.
_NOT_REMEMBERED = "I can't remember that for you: only the owner's own words become memory."
# "show my reminders", "what reminders do I have?", "do I have any reminders?"
_LIST_SCHEDULES = re.compile(
    r"\b(list|show|what are|which)\b.*\b(reminders|schedules)\b"
    r"|\b(what|any|how many)\s+(\w+\s+)?(reminders|schedules)\b",
    re.I,
)
_DELETE_SCHEDULE = re.compile(r"\b(delete|cancel|remove|stop)\b.*\b(sch-[0-9a-f]{8})\b", re.I)
# "delete the gym reminder", "stop reminding me to clean", "never mind the reminder about Carla": the
# schedule the other words name.
_DELETE_NAMED = re.compile(
    r"^\W*(?:(?:please|pls|ok|okay|hey|also|and|oh|can|could|would|will|you)\W+)*"
    r"(?:(?:delete|cancel|remove|stop|drop|clear)\b.*\b(?:reminders?|schedules?)\b"
    r"|(?:never\s*mind|forget(?:\s+about)?)\s+(?:the|my|that|this)\s+(?:\w+\s+)?(?:reminders?|schedules?)\b"
    r"|stop\s+reminding\s+(?:me|us)\b)",
    re.I | re.S,
)
# "delete all my reminders", "cancel all reminders": every one of them, not one they name.
# "delete all my reminders", "cancel all of the reminders, please": the whole message asks it, so
# "Stop, all my reminders are fine" or "forget the party but keep all my reminders" deletes nothing.
_ALL = re.compile(
    r"^\W*(?:(?:please|pls|ok|okay|can|could|would|will|you)\W+)*(?:delete|cancel|remove|clear|drop)\s+"
    r"(?:all|every(?:\s+one)?)(?:\s+of)?(?:\s+(?:my|the|our|these|those))?\s+(?:reminders|schedules)"
    r"(?:\W+(?:please|pls|now|thanks))*\W*$",
    re.I,
)
# The request's own words: what is left names the reminder.
_NOT_NAMING = stemmed(
    "ok okay oh hey also us delete cancel remove stop drop clear never mind forget reminder schedule anymore"
)
# Reminders are the owner's: a stranger asking for one, or for the list, had been told "Noted.".
_OWNER_REMINDERS = "Only the owner can set, list or cancel reminders here."
# Nor can a stranger make Cortex forget: the owner's admin commands are not theirs to be told.
_OWNER_FORGETS = "Only the owner can make me forget things."
# A reminder request it cannot read is told so: "Noted." had read as a promise.
_NO_REMINDER = (
    'I haven\'t set a reminder: {why}. Wordings I understand: "remind me in 20 minutes to …", '
    '"remind me tomorrow at 9 to …", "remind me on Friday at 5pm to …", "remind me on March 3 at 10am to …", '
    '"remind me every Monday and Friday at 8 to …", "remind me every 2 hours to …".'
)
_REMIND = "Remind the user: "


class OfflineClient:
    provider = "offline"
    reads_conversation = False
    model = "cortex-offline-1"

    def complete(self, request: LLMRequest) -> LLMResponse:
        results = _tool_results(request.messages[-1]) if request.messages else []
        response = self._after_tools(request, results) if results else self._first_turn(request)
        if failed := request.hints.get("failed_ops"):
            response = _telling_failures(request, response, failed)
        return response

    def _first_turn(self, request: LLMRequest) -> LLMResponse:
        hints = request.hints
        text = str(hints.get("text", ""))
        tools = {t.name for t in request.tools} if request.allow_tools else set()
        op = hints.get("completed_op")
        if text.strip().upper() == "HEARTBEAT":
            return _reply(request, "HEARTBEAT_OK")
        if (firing := hints.get("schedule")) and firing.get("overdue_op"):
            return _reply(request, "NO_REPLY")  # the failure is told first (failed_ops), or was already
        if firing:
            return _reply(request, _reminder(firing))
        if "schedule_create" in tools:
            scheduled = _schedule_call(request, text, hints)
            if scheduled is not None:
                return scheduled
        elif not request.tools and _about_reminders(text, hints):  # tools act for the owner alone
            return _reply(request, _OWNER_REMINDERS)
        if op:
            target = op.get("expected_channel") or hints.get("channel")
            summary = " ".join(str(op.get("result", "")).split())[:600]
            task = _delegated_task(op["description"])
            return _reply(request, f"[[send_to:{target}]] Your delegated task is done ({task}): {summary}")
        if late := hints.get("late_op"):  # told it failed, the owner still gets what came
            summary = " ".join(str(late["result"]).split())[:600]
            task = _delegated_task(late["description"])
            return _reply(
                request,
                f"[[send_to:{late['expected_channel']}]] A late result for your delegated task ({task}), "
                f"which I had told you failed at its deadline: {summary}",
            )
        if hints.get("op_note"):
            return _reply(request, f"Not recorded as a result: {hints['op_note']}.")
        if _THANKS.match(text):
            return _reply(request, "NO_REPLY")
        if _DELEGATE.search(text) and "sessions_spawn" in tools:
            return _tool(request, "sessions_spawn", {"task": text.strip()})
        if asks_to_forget(text) and (request.tools or only_asks_to_forget(text)):
            # A stranger's "Forget about it, let's go" is no request to the owner's memory.
            return _reply(request, _CANNOT_FORGET if request.tools else _OWNER_FORGETS)
        asked = asks(text)
        if asked and request.tools and (days := _past_days_asked(text, hints)):
            return _reply(request, _answer_days(hints.get("recalled") or [], days))
        pinned = _pins_asked_for(text, hints.get("pinned") or []) if asked else []
        if asked and (hints.get("recalled") or pinned):  # the context's recalled memories and pins
            recalled = _about_whom_asked(text, hints.get("recalled") or [])
            return _reply(request, _answer(recalled, pinned, asks_what_is_known(text)))
        if asked and "memory_query" in tools:
            return _tool(request, "memory_query", {"query": text.strip(), "limit": 5})
        greeting = _GREETING.match(text)
        if greeting and len(text.split()) <= 4:
            return _reply(request, f"{greeting.group(1).capitalize()}!")
        if hints.get("priority") == "urgent":
            return _reply(request, "Noted — flagged as urgent.")
        if _REMEMBER.search(text):  # tools act for the owner: without them the sender is a stranger
            return _reply(request, "Got it — I'll remember that." if request.tools else _NOT_REMEMBERED)
        return _reply(request, "Noted.")

    def _after_tools(self, request: LLMRequest, results: list[tuple[str, str]]) -> LLMResponse:
        name_by_id = _tool_names(request.messages)
        text = str(request.hints.get("text", ""))
        year = str(request.hints.get("now", ""))[:4]  # a time in another year shows its year
        lines: list[str] = []
        for tool_use_id, content in results:
            name = name_by_id.get(tool_use_id, "")
            try:
                payload = json.loads(content)
            except json.JSONDecodeError:
                payload = None
            if name == "sessions_spawn" and isinstance(payload, dict) and payload.get("op_id"):
                lines.append(
                    f"On it — I've handed that off as task {payload['op_id']} and will tell you "
                    "when the result is in."
                )
            elif name == "schedule_create" and isinstance(payload, dict):
                lines.append(_confirm(payload, year))
            elif name == "schedule_list" and isinstance(payload, list) and _DELETE_NAMED.search(text):
                if _ALL.match(text) and payload and request.allow_tools:
                    return _tools(request, "schedule_delete", [{"id": job["id"]} for job in payload])
                named = _named(text, payload)
                if len(named) == 1 and request.allow_tools:
                    return _tool(request, "schedule_delete", {"id": named[0]["id"]})
                lines.extend(_which_to_delete(named, payload, year))
            elif name == "schedule_list" and isinstance(payload, list):
                lines.append("Your schedules:" if payload else "You have no schedules.")
                lines.extend(f"- {_schedule_line(job, year)}" for job in payload)
            elif name == "schedule_delete" and isinstance(payload, dict):
                done = payload.get("deleted")
                lines.append(
                    f"Deleted {payload.get('id')}." if done else f"There is no schedule {payload.get('id')}."
                )
            elif name.startswith("schedule_") and payload is None:
                lines.append(f"I couldn't do that: {content}")
            elif name == "memory_query" and isinstance(payload, list):
                lines.append(_answer(_about_whom_asked(text, payload)))
        return _reply(request, "\n".join(lines) or "Noted.")


def _schedule_call(request: LLMRequest, text: str, hints: dict) -> LLMResponse | None:
    if match := _DELETE_SCHEDULE.search(text):
        return _tool(request, "schedule_delete", {"id": match.group(2)})
    # "delete the gym reminder": which one is decided once the list is in (`_named`)
    if _DELETE_NAMED.search(text) or _LIST_SCHEDULES.search(text):
        return _tool(request, "schedule_list", {})
    timezone = str(hints.get("timezone") or "UTC")
    try:
        wish = english.parse(text, _asked_at(hints, ZoneInfo(timezone)))
    except english.Unreadable as why:  # "remind me what my locker code is" asks memory instead
        return None if asks(text) else _reply(request, _NO_REMINDER.format(why=why))
    if wish is None:
        return None
    action = f"{_REMIND}{wish.task}."
    if len(action) > schedules.ACTION_MAX:
        most = schedules.ACTION_MAX - len(_REMIND) - 1
        why = f"its text is {len(wish.task):,} characters long, and a reminder holds at most {most:,}"
        return _reply(request, _NO_REMINDER.format(why=why))
    args = {
        "description": _shortened(wish.task, schedules.DESCRIPTION_MAX),
        "action": action,
        "timezone": timezone,
    }
    if wish.cron:
        args["cron"] = wish.cron
    else:
        args["at"] = wish.at.isoformat()
    return _tool(request, "schedule_create", args)


def _about_reminders(text: str, hints: dict) -> bool:
    """Whether a message asks to set, list or cancel a reminder."""
    if _DELETE_SCHEDULE.search(text) or _DELETE_NAMED.search(text) or _LIST_SCHEDULES.search(text):
        return True
    try:
        return (
            english.parse(text, _asked_at(hints, ZoneInfo(str(hints.get("timezone") or "UTC")))) is not None
        )
    except english.Unreadable:
        return not asks(text)


def _asked_at(hints: dict, zone: ZoneInfo) -> datetime:
    """When the user asked, on their wall clock: "in 10 minutes" counts from the message's sent time,
    not from when Cortex read it, and never from beyond now. The zone, not the hint's fixed offset,
    keeps "tomorrow at 9" at 09:00 across a clock change."""
    now = datetime.fromisoformat(str(hints["now"])) if hints.get("now") else datetime.now(UTC)
    sent = datetime.fromisoformat(str(hints["sent_at"])) if hints.get("sent_at") else now
    return min(now, sent).astimezone(zone)


def _shortened(text: str, most: int) -> str:
    """`text` within `most` characters, cut at a word with "…"; the action keeps it whole."""
    if len(text) <= most:
        return text
    cut = text[: most - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"


def _when(iso: str | None, year: str = "") -> str:
    """The time without its year when that is `year`: "on March 3" asked in April is next year's."""
    if not iso:
        return "never"
    shown = "%a %d %b at %H:%M" if iso.startswith(year) else "%a %d %b %Y at %H:%M"
    return datetime.fromisoformat(iso).strftime(shown)


def _schedule_line(job: dict, year: str = "") -> str:
    repeat = "" if job.get("when") == "once" else f", repeating {job.get('repeats') or job.get('when')}"
    return (
        f"{job.get('id')}: {job.get('description')} — next {_when(job.get('next_fire'), year)} "
        f"{job.get('timezone')}{repeat}, to {job.get('target_channel')}"
    )


def _confirm(job: dict, year: str) -> str:
    return f"Okay, I'll remind you: {_schedule_line(job, year)}."


def _named(text: str, jobs: list) -> list[dict]:
    """The jobs whose description and action hold every word of `text` but the request's own: "gym"
    in "delete the gym reminder"; all of them when it names none ("cancel my reminder")."""
    named = stemmed(text) - _NOT_NAMING
    return [job for job in jobs if named <= stemmed(f"{job.get('description')} {job.get('action')}")]


def _which_to_delete(named: list[dict], jobs: list, year: str) -> list[str]:
    """Nothing deleted: the matching jobs, to pick one by id, or those there are."""
    if named:
        head = 'Which one should I cancel? Say "cancel" and its id:'
    elif jobs:
        head, named = "You have no such reminder, so I cancelled nothing. Your schedules:", jobs
    else:
        return ["You have no such reminder: you have no schedules."]
    return [head, *(f"- {_schedule_line(job, year)}" for job in named)]


def _reminder(firing: dict) -> str:
    """The reminder's whole text: the action this provider wrote, else the (shortened) description."""
    action = str(firing.get("action") or "")
    what = action.removeprefix(_REMIND).removesuffix(".") if action.startswith(_REMIND) else None
    text = f"Reminder: {what or firing.get('description', 'scheduled job')}"
    if firing.get("late"):
        due, missed = firing.get("due_at"), int(firing.get("missed") or 0)
        before = f", and {missed} time(s) before that" if missed else ""  # folded into this one
        text += f" (this was due {_when(due)}{before}; I'm late because I was not running)"
    elif missed := int(firing.get("missed") or 0):  # on time now, missed before
        text += f" (I was not running for the {missed} time(s) before this one)"
    if firing.get("rerouted"):  # the firing says where its reply goes, and why not where it was asked
        text += f" ({firing['rerouted']})"
    return text


# The answer quotes the best memory and those scoring at least this share of it, up to QUOTED_MOST:
# the close contenders, not a fixed three padded with weak hits. Paraphrase set, tune half: the reply
# carried the statement 71% -> 76% (live and settled), 3.2 quoted lines a reply (3.0 before); a
# share of 0.65 reached 79% with 4.0 lines, 0.8 quoted 2.6 and lost statements.
CLOSE_TO_BEST = 0.75
QUOTED_MOST = 5


def _pins_asked_for(text: str, pins: list[str]) -> list[str]:
    """The pins a question names: those holding half its words, or two of them, as full-text search
    counts words ("When does my passport expire?" names "Maya's passport expires 2027-03-01"). The
    context leaves pins out of its recalled memories, since the floor shows them to a model."""
    asked = stemmed(text)
    if not asked:
        return []
    need = min(2, len(asked) / 2)
    return [p for p in pins if len(asked & stemmed(p)) >= need]


# A question about someone by name, as its subject: "What is Tom allergic to?", "Where does Kenji
# work?", "When is Anna's birthday?", "Is Tom vegetarian?", "What's Priya's number?".
_ABOUT_SOMEONE = re.compile(
    r"^\W*(?:(?:(?:what|where|when|who|how|which|why)\b(?:\s+\w+){0,3}?\s+)?"
    r"(?:is|are|was|were|does|did|has|have|can|will|would|should)|(?:what|where|when|who|how)['’]s)"
    r"\s+(?P<name>[A-Z][a-z][\w-]*)",
    re.I,
)


def _about_whom_asked(question: str, hits: list) -> list:
    """For a question about someone by name, the memories that name them or that they said: the
    owner's "I'm allergic to penicillin" answered "What is Tom allergic to?" as if it were Tom's."""
    match = _ABOUT_SOMEONE.match(question)
    if match is None or not match["name"][0].isupper() or re.fullmatch(RELATIONS, match["name"], re.I):
        return hits  # "Mum" is also "my mother"
    name = match["name"].lower()
    named = re.compile(rf"\b{re.escape(name)}\b", re.I)
    return [
        h
        for h in hits
        if isinstance(h, dict) and (named.search(str(h.get("text"))) or str(h.get("sender")).lower() == name)
    ]


def _answer(hits: list, pinned: list[str] = (), everything: bool = False) -> str:
    """Quote the pins the question names, then the best memory and those close to it (all of the
    first QUOTED_MOST for a question about `everything` known), with where and when each was said."""
    hits = [h for h in hits if isinstance(h, dict) and h.get("text")][:QUOTED_MOST]
    if hits and not everything:
        floor = CLOSE_TO_BEST * float(hits[0].get("score") or 0.0)
        hits = hits[:1] + [h for h in hits[1:] if float(h.get("score") or 0.0) >= floor]
    shown = {normalize(p) for p in pinned}
    lines = [f"- {_quote({'text': p})} (pinned)" for p in pinned]
    lines += [f"- {_quote(h)}" for h in hits if normalize(str(h["text"])) not in shown]
    if not lines:
        return "I don't have anything on that yet."
    return "\n".join(["Here's what I have:", *lines])


def _past_days_asked(text: str, hints: dict) -> list[date]:
    """The past days a question names, counted from the owner's date when it was sent."""
    sent = datetime.fromisoformat(str(hints.get("sent_at") or hints["now"]))
    return past_days(text, sent.astimezone(ZoneInfo(str(hints.get("timezone") or "UTC"))).date())


def _answer_days(hits: list, days: list[date]) -> str:
    """Every recalled statement said on the days asked about, in recall's order (the closest in
    meaning alone had left most of a day out), or that the owner said nothing then: an older day's
    statement is no answer to "what did I tell you yesterday?"."""
    asked = {d.isoformat() for d in days}
    said = [h for h in hits if isinstance(h, dict) and h.get("text") and h.get("date") in asked]
    if not said:
        first, last = min(days), max(days)
        when = f"on {first:%A %-d %B}" if first == last else f"from {first:%-d %B} to {last:%-d %B}"
        return f"You didn't tell me anything {when}, as far as I have it."
    return "\n".join(["Here's what you told me then:", *(f"- {_quote(h)}" for h in said)])


def _stated(text: str) -> str:
    """What a message states, without what it asks: "I need a blood transfusion, what's my type?"
    is a memory for what it tells, and quoted whole it read as the user's question answered back."""
    said = [stated_part(s) or s for s in split_sentences(text)]
    return " ".join(s for s in said if not is_question(s)) or text


def _quote(hit: dict) -> str:
    text = " ".join(_stated(str(hit["text"])).split())
    if len(text) > 240:
        text = text[:237] + "..."
    if hit.get("origin") == OP_HARVEST:  # another agent's text, never presented as the user's
        text = f"a delegated task's result (not you): {text}"
    elif hit.get("said_by_owner") is False:  # someone else's words, never presented as the user's
        text = f"{' '.join(str(hit.get('sender') or 'someone').split())[:40]} (not you) said: {text}"
    where = ", ".join(str(v) for v in (hit.get("channel"), hit.get("date")) if v)
    sources = hit.get("sources") or []
    ref = f"msg {', '.join(str(s) for s in sources[:3])}" if sources else ""
    since = f"since updated in msg {hit['updated_by']}" if hit.get("updated_by") else ""
    meta = "; ".join(p for p in (where, ref, since) if p)
    return f"{text} ({meta})" if meta else text


def _tool_results(message: dict) -> list[tuple[str, str]]:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    out = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            body = block.get("content", "")
            if isinstance(body, list):
                body = "".join(b.get("text", "") for b in body if isinstance(b, dict))
            out.append((block.get("tool_use_id", ""), str(body)))
    return out


def _tool_names(messages: list[dict]) -> dict[str, str]:
    names = {}
    for message in messages:
        if message.get("role") == "assistant" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if block.get("type") == "tool_use":
                    names[block["id"]] = block["name"]
    return names


def _usage_in(request: LLMRequest) -> int:
    return estimate_tokens(request.system) + estimate_tokens(json.dumps(request.messages))


def _telling_failures(request: LLMRequest, response: LLMResponse, failed: list[dict]) -> LLMResponse:
    """The answer with the delegated work that failed since the owner last heard, first: offline, a
    task past its deadline had never been told of (QA, helper-37)."""
    if response.tool_calls or response.text.strip() == "HEARTBEAT_OK":
        return response
    told = "\n".join(
        f"Your delegated task failed ({_delegated_task(op['description'])}): "
        f"{str(op['result']).removeprefix('Error: ')}."
        for op in failed
    )
    text = "" if response.text.strip() == "NO_REPLY" else response.text
    directive = re.match(r"\[\[send_to:[^\]]*\]\]\s*", text)
    head = directive.group(0) if directive else ""
    return _reply(request, f"{head}{told}\n{text[len(head) :]}".rstrip())


def _delegated_task(task: str) -> str:
    """A delegated task, as the reply names it: its first words, marked when cut ("… prices? I" had
    read as the whole task). Erasure finds the copy by the same cut (`text.first_words`)."""
    named = first_words(task)
    return named if named == collapse_spaces(task) else f"{named} …"


def _reply(request: LLMRequest, text: str) -> LLMResponse:
    return LLMResponse(
        text=text,
        tool_calls=[],
        content=[{"type": "text", "text": text}],
        stop_reason="end_turn",
        input_tokens=_usage_in(request),
        output_tokens=estimate_tokens(text),
        model=OfflineClient.model,
    )


def _tool(request: LLMRequest, name: str, args: dict) -> LLMResponse:
    return _tools(request, name, [args])


def _tools(request: LLMRequest, name: str, each: list[dict]) -> LLMResponse:
    """One call of tool `name` per arguments in `each`, in one response."""
    ids = [f"offline_{name}_{len(request.messages)}" + (f"_{n}" if n else "") for n in range(len(each))]
    return LLMResponse(
        text="",
        tool_calls=[ToolCall(call_id, name, args) for call_id, args in zip(ids, each, strict=True)],
        content=[
            {"type": "tool_use", "id": call_id, "name": name, "input": args}
            for call_id, args in zip(ids, each, strict=True)
        ],
        stop_reason="tool_use",
        input_tokens=_usage_in(request),
        output_tokens=estimate_tokens(json.dumps(each)),
        model=OfflineClient.model,
    )
