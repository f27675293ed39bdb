"""Recall quality: can the model answer from months of conversation it no longer sees?

    python -m bench.recall [--fake] [--messages N] [--months M] [--seed S]
                           [--context-tokens T] [--max-tool-calls K] [--kinds K,...]
                           [--base-url URL] [--api-key KEY] [--model NAME]
                           [--timeout S] [--parallel P] [--json PATH]

A LoCoMo-style check, not a timed one. A seeded generator writes one person's chat over
a few months: small talk, and among it facts said once (names, a door code, a password,
a licence plate), facts that later change (a move, a new job) and events whose date is
the answer. Then the same questions are asked in three modes, each question on a fresh
gateway over a fresh copy of the same stored conversation, so no answer leaks into the
next question:

- `timeline`: no tools (`llm_max_tool_calls=0`); the model sees the archive's summaries,
  the profile and the live window. The baseline the others are compared to.
- `tools`: the same archive, with the recall tools on (`llm_max_tool_calls=6`).
- `full`: no tools, and a context budget and live window so large that nothing is
  archived or trimmed: the whole conversation is in every prompt.

The conversation is written straight into the gateway's own message store (the
assistant's side is scripted too), so every mode reads the same words whatever the
model; then the gateway's archive cuts, summarises (with the model under test) and rolls
up the chunks session by session, as turns would have. `timeline` and `tools` run on
copies of that one archive: the same summaries, so the difference is the tools.

Model calls go through a small recording proxy in front of the endpoint: a question's
prompt tokens are the sum over every model call of its turn, from the server's usage
where it reports one, else estimated with `memory.token_count.estimate_tokens`.

`--fake` plays the model with the scripted fake server of the test suite: it summarises
without any detail, extracts no profile facts, and answers by finding the line with the
question's words in what it is shown (in `tools` mode after one `archive_search`). Its
accuracy only proves the plumbing, never a model's quality.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import sys
import tempfile
import time
import unicodedata
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import httpx
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bench.memory_support import machine, machine_line
from connectors.webchat.visitors import CHANNEL, VISITOR_NAME
from gateway.jobs.memory_jobs import ArchiveMemory
from gateway.jobs.queue import EmbeddedQueue
from gateway.logs import configure_logging
from gateway.services import Services
from gateway.settings import Settings
from gateway.turns.persona import load_persona
from gateway.wiring import archive_dir
from memory.archive.numbers import MemoryLimits
from memory.profile.extraction import EXTRACT_SYSTEM
from memory.storage.engine import session_factory
from memory.storage.messages import NewMessage
from memory.storage.models import Conversation, Delivery, Identity, Role
from memory.token_count import estimate_tokens, message_tokens
from tests.fakes.llm_server import Behaviour, CallTools, Reply, fake_llm
from tests.support.clock import ManualClock
from tests.support.harness import ADMIN_TOKEN, make_settings, running_gateway
from tests.support.servers import serve

Kind = Literal["detail", "now", "before", "when"]
KINDS: tuple[Kind, ...] = ("detail", "now", "before", "when")
KIND_GROUPS: dict[str, tuple[Kind, ...]] = {
    "detail": ("detail",),
    "changed": ("now", "before"),
    "when": ("when",),
}
START = datetime(2024, 1, 8, tzinfo=UTC)  # a Monday; the person's zone is UTC
EXCHANGES_PER_SESSION = 4
SITTING_MINUTES = 180  # a sitting starts by 20:00 and so ends before midnight
MIN_MESSAGES = 40
# The archive's model: small enough that a few hundred messages get archived.
DEFAULT_CONTEXT_TOKENS = 16_000
# `full` mode: budgets no conversation of this bench reaches, so nothing is archived or
# trimmed. Only the gateway's budget: the real model's window must hold the prompt.
FULL_CONTEXT_TOKENS = 1_000_000
SETTLE_ROUNDS = 30
DRAIN_POLL_SECONDS = 5.0
FAILED_SUMMARY_ATTEMPTS = 3
PROBE_SECONDS = 3.0
SCORING = (
    "an answer counts if the reply contains one of the expected answers after "
    "normalising both (accents and case folded, punctuation to spaces, whole words)"
)
DESCRIPTION = "Recall quality: can the model answer from months of conversation it no longer sees?"
SUMMARY_PREFIX = "You keep the archive"  # memory.archive.summarize's system prompt
FAKE_SUMMARY = "{first} to {last}: everyday small chat (a scripted summary that keeps no details)."


class BenchError(Exception):
    """The run cannot go on (the model keeps failing)."""


# -- the conversation ---------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    """A fact as the person says it, once, at a point of the conversation (0 to 1)."""

    id: str
    at: float
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    kind: Kind
    text: str
    statement: str  # the statement that holds the answer
    answers: tuple[str, ...]  # any one counts
    # Words of the question that the statement shares: what the fake searches for.
    topic: tuple[str, ...]
    # A changed fact's other value: a reply naming it too is counted as ambiguous.
    other: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exchange:
    at: datetime
    user: str
    reply: str
    statement: str | None = None


@dataclass(frozen=True)
class Chat:
    exchanges: tuple[Exchange, ...]
    questions: tuple[Question, ...]
    asked_at: datetime

    @property
    def messages(self) -> int:
        return 2 * len(self.exchanges)

    @property
    def tokens(self) -> int:
        return sum(message_tokens(e.user) + message_tokens(e.reply) for e in self.exchanges)

    def sessions(self) -> list[list[Exchange]]:
        """The exchanges grouped by day: the person's sittings."""
        days: dict[date, list[Exchange]] = {}
        for exchange in self.exchanges:
            days.setdefault(exchange.at.date(), []).append(exchange)
        return list(days.values())


_WEATHER = ["grey and drizzly", "bright and cold", "warm for once", "windy", "foggy", "sunny"]
_DISHES = ["a lentil soup", "a mushroom risotto", "pancakes", "a vegetable curry", "fish tacos"]
_ADJ = ["pretty good", "a bit bland", "great", "better than last time", "too salty", "fine"]
_SHOWS = ["a nature documentary", "an old detective series", "a baking contest", "a space film"]
_HOBBIES = ["sketching", "repotting plants", "a long walk", "baking bread", "a jigsaw puzzle"]
_PLACES = ["bakery", "park", "market", "library", "cafe", "bookshop"]
_PLANS = ["a picnic", "a museum visit", "a quiet day at home", "a trip to the coast", "a hike"]
_SMALL_TALK = [
    "The weather is {weather} today.",
    "I made {dish} for dinner, and it was {adj}.",
    "Last night I watched {show}; it was {adj}.",
    "This afternoon I spent an hour on {hobby}.",
    "The {place} was busy this morning.",
    "I'm thinking about {plan} this weekend.",
    "Coffee at the {place} was {adj}.",
    "A friend recommended {show}, so it's on my list.",
    "Traffic was slow, so I listened to a podcast about old ships.",
    "I should really sleep earlier; I keep reading until midnight.",
    "My tomato seedlings finally look healthy again.",
]
_REPLIES = [
    "That sounds nice.",
    "Thanks for sharing that!",
    "Glad to hear it.",
    "Enjoy the rest of your day.",
    "That sounds like a good plan.",
    "Oh, nice! Tell me how it goes.",
    "Thanks for telling me; I'll keep it in mind.",
]


def generate(messages: int, months: int, seed: int) -> Chat:
    """A deterministic chat of about `messages` messages (user and assistant) over
    `months` months, with every fact statement at its place and questions about them."""
    if messages < MIN_MESSAGES:
        raise ValueError(f"--messages must be at least {MIN_MESSAGES}")
    if months < 1:
        raise ValueError("--months must be at least 1")
    rng = random.Random(seed)
    statements, questions = _facts(rng)
    count = messages // 2
    texts = [_small_talk(rng) for _ in range(count)]
    placed: dict[int, Statement] = {}
    for statement in statements:
        index = min(count - 1, round(statement.at * (count - 1)))
        while index in placed:  # two facts on one exchange: take the next free one
            index = (index + 1) % count
        placed[index] = statement
        texts[index] = f"{_sentence(rng)} {statement.text}"
    times = _times(rng, count, days=months * 30)
    exchanges = tuple(
        Exchange(
            at=times[i],
            user=texts[i],
            reply=rng.choice(_REPLIES),
            statement=placed[i].id if i in placed else None,
        )
        for i in range(count)
    )
    # A "when" question's answer is the day its statement was sent.
    day_of = {e.statement: e.at for e in exchanges if e.statement}
    dated = tuple(
        replace(q, answers=day_names(day_of[q.statement])) if q.kind == "when" else q
        for q in questions
    )
    # The questions come two days after the last sitting, in the morning.
    asked_at = datetime.combine(times[-1].date() + timedelta(days=2), START.timetz())
    chat = Chat(exchanges, dated, asked_at + timedelta(hours=10))
    _check_unambiguous(chat)
    return chat


def _facts(rng: random.Random) -> tuple[list[Statement], list[Question]]:
    """The facts, their values drawn from `rng`, and the questions that ask for them."""
    sister = rng.choice(["Clara", "Ines", "Maren", "Talia", "Noor", "Freya"])
    dog = rng.choice(["Biscuit", "Pepper", "Miso", "Juniper", "Waffles", "Pickle"])
    door = str(rng.randint(1000, 9999))
    locker = str(rng.randint(100, 399))
    wifi = rng.choice(["bluefjord", "mossylark", "quietpine", "amberkite"]) + str(
        rng.randint(10, 99)
    )
    dentist = rng.choice(["Okafor", "Lindqvist", "Moreau", "Castellano", "Haddad"])
    letters = "ABCDEFGHJKLMNPRSTVXZ"
    plate = (
        f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randint(100, 999)}-"
        f"{rng.choice(letters)}{rng.choice(letters)}"
    )
    old_city, new_city = rng.sample(["Lyon", "Porto", "Leipzig", "Valencia", "Bergen", "Ghent"], 2)
    old_job, new_job = rng.sample(
        ["Nordlicht Analytics", "Tidewater Labs", "Greystone Logistics", "Copperleaf Health"], 2
    )
    role = rng.choice(["data engineer", "product designer", "support lead", "accountant"])
    statements = [
        Statement("sister", 0.03, f"My sister is named {sister}; she is two years older than me."),
        Statement("city-old", 0.06, f"I live in {old_city}, in a small flat near the river."),
        Statement("job-old", 0.10, f"I work at {old_job} as a {role}."),
        Statement("dog", 0.16, f"We adopted a rescue beagle, and the dog is named {dog}."),
        Statement("door", 0.22, f"Note to self: the door code for my building is {door}."),
        Statement("marathon", 0.28, "I ran my first half marathon this morning, so tired!"),
        Statement("locker", 0.34, f"My locker number at the gym is {locker}, near the showers."),
        Statement("driving", 0.42, "I passed my driving test today, on the second try!"),
        Statement("wifi", 0.50, f"The wifi password at my parents' cabin is {wifi}."),
        Statement("dentist", 0.56, f"My new dentist is Dr. {dentist}, the one by the station."),
        Statement("city-new", 0.62, f"The move is finally done: I live in {new_city} now."),
        Statement(
            "job-new", 0.70, f"First week at the new job went well: I work at {new_job} now."
        ),
        Statement("grandma", 0.80, "My grandmother turned ninety today; we had a big lunch."),
        Statement("plate", 0.90, f"My car's licence plate is {plate}, I always forget it."),
    ]

    def detail(sid: str, text: str, answers: tuple[str, ...], topic: tuple[str, ...]) -> Question:
        return Question(sid, "detail", text, sid, answers, topic)

    def when(sid: str, text: str, topic: tuple[str, ...]) -> Question:
        return Question(sid, "when", text, sid, (), topic)  # answers: the day, once placed

    questions = [
        detail("sister", "What is my sister named?", (sister,), ("sister", "named")),
        detail("dog", "What is my dog named?", (dog,), ("dog", "named")),
        detail("door", "What is the door code for my building?", (door,), ("door", "code")),
        detail("locker", "What is my locker number at the gym?", (locker,), ("locker", "gym")),
        detail("wifi", "What is the wifi password at my parents' cabin?", (wifi,), ("wifi",)),
        detail("dentist", "What is my dentist called?", (dentist,), ("dentist",)),
        detail("plate", "What is my car's licence plate?", (plate,), ("licence", "plate")),
        Question(
            "city-now", "now", "Which city do I live in now?", "city-new",
            (new_city,), ("live",), (old_city,),
        ),
        Question(
            "city-before", "before", "Which city did I live in before I moved?", "city-old",
            (old_city,), ("live",), (new_city,),
        ),
        Question(
            "job-now", "now", "Where do I work now?", "job-new",
            (new_job, new_job.split()[0]), ("work",), (old_job,),
        ),
        Question(
            "job-before", "before", "Where did I work before I changed jobs?", "job-old",
            (old_job, old_job.split()[0]), ("work",), (new_job,),
        ),
        when("marathon", "When did I run my first half marathon?", ("half", "marathon")),
        when("driving", "When did I pass my driving test?", ("driving", "test")),
        when("grandma", "When did my grandmother turn ninety?", ("grandmother", "ninety")),
    ]  # fmt: skip
    return statements, questions


def _small_talk(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 5)))


def _sentence(rng: random.Random) -> str:
    return rng.choice(_SMALL_TALK).format(
        weather=rng.choice(_WEATHER),
        dish=rng.choice(_DISHES),
        adj=rng.choice(_ADJ),
        show=rng.choice(_SHOWS),
        hobby=rng.choice(_HOBBIES),
        place=rng.choice(_PLACES),
        plan=rng.choice(_PLANS),
    )


def _times(rng: random.Random, count: int, days: int) -> list[datetime]:
    """When each exchange is sent: sittings of a few exchanges on distinct days, spread
    over `days`, each starting at a random hour, a few minutes between exchanges."""
    sessions = max(1, min(days, round(count / EXCHANGES_PER_SESSION)))
    per_session = -(-count // sessions)
    if per_session > SITTING_MINUTES:
        raise ValueError("too many messages for --months: a sitting would pass midnight")
    gap = SITTING_MINUTES // per_session
    session_days = sorted([0, *rng.sample(range(1, days), sessions - 1)])
    starts = [
        START + timedelta(days=day, hours=rng.randint(7, 19), minutes=rng.randint(0, 59))
        for day in session_days
    ]
    session_of = [i * sessions // count for i in range(count)]
    first: dict[int, int] = {}
    for i, session in enumerate(session_of):
        first.setdefault(session, i)
    return [
        starts[session] + timedelta(minutes=gap * (i - first[session]))
        for i, session in enumerate(session_of)
    ]


def _check_unambiguous(chat: Chat) -> None:
    """Make sure every question's topic words occur together only in its fact's own
    statements (the two of a changed fact share an id prefix, `city-old`, `city-new`):
    else the fake's reader would be unfair, and so would the scoring."""
    texts = [e.user for e in chat.exchanges] + [e.reply for e in chat.exchanges]
    texts.append(FAKE_SUMMARY)
    for question in chat.questions:
        fact = question.statement.split("-")[0]
        own = {e.user for e in chat.exchanges if (e.statement or "").split("-")[0] == fact}
        carriers = {t for t in texts if all(has_word(t, w) for w in question.topic)}
        if not carriers or carriers - own or any("?" in text for text in own):
            raise AssertionError(f"question {question.id!r} is ambiguous: {sorted(carriers)}")


def day_names(moment: datetime) -> tuple[str, ...]:
    """The ways a reply may name a day: 2024-03-10, 10 March, March 10, 10th of March…"""
    day, month = moment.day, f"{moment:%B}"
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return (
        f"{moment:%Y-%m-%d}",
        f"{day} {month}",
        f"{month} {day}",
        f"{day}{suffix} {month}",
        f"{month} {day}{suffix}",
        f"{day}{suffix} of {month}",
    )


# -- scoring ------------------------------------------------------------------------


def normalise(text: str) -> str:
    """Accents and case folded, everything but letters and digits to single spaces."""
    plain = "".join(
        c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
    ).casefold()
    return " ".join("".join(c if c.isalnum() else " " for c in plain).split())


def names(reply: str, answers: Sequence[str]) -> bool:
    """Whether the reply names one of `answers`, as whole words."""
    padded = f" {normalise(reply)} "
    return any(f" {normalise(answer)} " in padded for answer in answers if normalise(answer))


def has_word(text: str, word: str) -> bool:
    return word in normalise(text).split()


# -- the recording proxy ------------------------------------------------------------


@dataclass
class ModelCall:
    """One request to the model, as the proxy saw it."""

    body: dict[str, Any]
    usage_prompt_tokens: int | None = None

    @property
    def estimated_prompt_tokens(self) -> int:
        total = estimate_tokens(json.dumps(self.body["tools"])) if self.body.get("tools") else 0
        for message in self.body.get("messages") or []:
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content) if content else ""
            total += message_tokens(text)
            if message.get("tool_calls"):
                total += estimate_tokens(json.dumps(message["tool_calls"]))
        return total

    def is_turn_for(self, question: str, persona_head: str) -> bool:
        """A turn's call (the persona opens its system prompt) answering `question`."""
        messages = self.body.get("messages") or []
        if not messages or not str(messages[0].get("content", "")).startswith(persona_head):
            return False
        users = [m for m in messages if m.get("role") == "user"]
        return bool(users) and question in str(users[-1].get("content", ""))

    def read_usage(self, pending: bytes) -> bytes:
        """Take the usage from the complete server-sent event lines of `pending`; return
        the incomplete rest."""
        *lines, rest = pending.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            with contextlib.suppress(ValueError):
                usage = json.loads(line[5:]).get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
                    self.usage_prompt_tokens = usage["prompt_tokens"]
        return rest


class RecordingProxy:
    """Forwards the gateway's model requests to `upstream` as they are, streams the
    answers back, and keeps each request with the prompt tokens its answer reported."""

    _FORWARDED = ("authorization", "content-type", "accept")

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.calls: list[ModelCall] = []
        # No read timeout of its own: the gateway's (PARLEY_LLM_TIMEOUT_SECONDS) decides.
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))
        self.app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["POST"])])

    async def _forward(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        call = ModelCall(body if isinstance(body, dict) else {})
        self.calls.append(call)
        headers = {k: v for k, v in request.headers.items() if k.lower() in self._FORWARDED}
        url = f"{self.upstream}/{request.path_params['path']}"
        try:
            answer = await self._client.send(
                self._client.build_request("POST", url, content=raw, headers=headers), stream=True
            )
        except httpx.HTTPError as exc:
            return JSONResponse({"error": {"message": f"proxy: {exc!r}"}}, status_code=502)
        return StreamingResponse(
            self._relay(answer, call),
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type"),
        )

    async def _relay(self, answer: httpx.Response, call: ModelCall) -> AsyncIterator[bytes]:
        pending = b""
        try:
            async for data in answer.aiter_bytes():
                pending = call.read_usage(pending + data)
                yield data
        finally:
            await answer.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()


@contextlib.asynccontextmanager
async def recording_proxy(upstream: str) -> AsyncIterator[tuple[RecordingProxy, str]]:
    proxy = RecordingProxy(upstream)
    try:
        async with serve(proxy.app) as url:
            yield proxy, url
    finally:
        await proxy.aclose()


# -- the scripted fake model --------------------------------------------------------

_TIME_HEADER = re.compile(r"^\[time: (\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]$")
_ROW_HEADING = re.compile(r"^## (\d{4}-\d{2}-\d{2})")
_HIT = re.compile(r"^- (\d{4}-\d{2}-\d{2} \d{2}:\d{2}) · (.+)$")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_READ_SECTIONS = ("# Earlier in this conversation (archive)", "# What you know about the user")


@dataclass(frozen=True)
class _Line:
    when: str  # "YYYY-MM-DD HH:MM", a day, or "" if nothing says
    text: str


class ScriptedModel:
    """A `FakeLLM.responder` that plays the model of every call the gateway makes.

    Summaries keep no details (the worst case for `timeline`); profile extraction finds
    no facts. A turn's answer is the line, among those it is shown, that holds all the
    question's topic words: the latest for a current fact, the earliest for a former one
    or a date. With tools offered it first calls `archive_search` with those words. It
    knows each question's topic words and kind, never its answer."""

    def __init__(self, questions: Sequence[Question]) -> None:
        self._questions = list(questions)

    def __call__(self, body: dict[str, Any], number: int) -> Behaviour | None:
        messages: list[dict[str, Any]] = body.get("messages") or []
        system = str(messages[0].get("content", "")) if messages else ""
        if system.startswith(SUMMARY_PREFIX):
            days = _DAY.findall(str(messages[-1].get("content", "")))
            return Reply(
                FAKE_SUMMARY.format(first=min(days, default="?"), last=max(days, default="?"))
            )
        if system.startswith(EXTRACT_SYSTEM[:40]):
            return Reply('{"facts": []}')
        question = self._asked(messages)
        if question is None:
            return Reply("Noted.")
        results = [str(m.get("content", "")) for m in messages if m.get("role") == "tool"]
        if body.get("tools") and not results:
            return CallTools([("archive_search", {"query": " ".join(question.topic)})])
        return Reply(_read(question, _shown(messages) + _hits(results)))

    def _asked(self, messages: list[dict[str, Any]]) -> Question | None:
        users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
        return next((q for q in self._questions if users and q.text in users[-1]), None)


def _shown(messages: list[dict[str, Any]]) -> list[_Line]:
    """What the prompt shows as lines, each with the time it was said (as far as the
    prompt tells): timeline and profile rows, then the person's live messages."""
    lines: list[_Line] = []
    section, when = "", ""
    for line in str(messages[0].get("content", "")).splitlines():
        if line.startswith("# "):
            section, when = line, ""
        elif heading := _ROW_HEADING.match(line):
            when = heading.group(1)
        elif section in _READ_SECTIONS and line.strip():
            lines.append(_Line(when, line))
    when = ""
    for message in messages[1:]:
        if message.get("role") != "user":
            continue
        for line in str(message.get("content", "")).splitlines():
            if stamp := _TIME_HEADER.match(line):
                when = stamp.group(1)  # a time is shown after a pause: it holds until the next
            elif not line.startswith("["):
                lines.append(_Line(when, line))
    return lines


def _hits(results: list[str]) -> list[_Line]:
    return [
        _Line(hit.group(1), hit.group(2))
        for result in results
        for hit in map(_HIT.match, result.splitlines())
        if hit
    ]


def _read(question: Question, lines: list[_Line]) -> str:
    found = [
        (line.when, i, line)
        for i, line in enumerate(lines)
        if "?" not in line.text and all(has_word(line.text, w) for w in question.topic)
    ]
    if not found:
        return "I don't remember that; nothing I can see says."
    pick = min(found) if question.kind in ("before", "when") else max(found)
    return f"On {pick[0][:10] or 'a day I cannot see'} you wrote: {pick[2].text}"


# -- the gateway --------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # the proxy's, as the gateway is configured
    api_key: str | None
    model: str
    timeout: float
    fake: bool


@dataclass(frozen=True)
class Mode:
    name: str
    archived: bool  # over the archived conversation (else over the unarchived one)
    max_tool_calls: int
    context_tokens: int
    live_window_tokens: int | None = None


def modes(context_tokens: int, max_tool_calls: int) -> tuple[Mode, ...]:
    return (
        Mode("timeline", True, 0, context_tokens),
        Mode("tools", True, max_tool_calls, context_tokens),
        Mode("full", False, 0, FULL_CONTEXT_TOKENS, live_window_tokens=FULL_CONTEXT_TOKENS),
    )


ARCHIVE_DEFAULTS = MemoryLimits()
_ARCHIVE_SETTINGS = (
    "live_window_tokens",
    "chunk_tokens",
    "chunk_min_tokens",
    "summary_tokens",
    "consolidate_at",
    "consolidate_count",
    "rollup_keep",
    "rollup_batch",
)


def _settings(data_dir: Path, endpoint: Endpoint, mode: Mode) -> Settings:
    extra: dict[str, Any] = {
        "llm_provider": "openai",
        "llm_base_url": endpoint.base_url,
        "llm_api_key": endpoint.api_key,
        "llm_model": endpoint.model,
        "llm_timeout_seconds": endpoint.timeout,
        "llm_context_tokens": mode.context_tokens,
        "llm_max_tool_calls": mode.max_tool_calls,
        "summary_model": None,  # summaries and profile extraction use the same model
        "log_level": "warning",
        "redis_url": None,  # the embedded job queue, whose idle() the bench waits on
        "default_timezone": "UTC",  # the zone the "when" answers are written in
        # What shapes the archive is pinned to the defaults, so no PARLEY_* variable
        # in the environment changes what is measured.
        **{name: getattr(ARCHIVE_DEFAULTS, name) for name in _ARCHIVE_SETTINGS},
        "summary_window_tokens": None,
        # A failed summary is retried soon: the build waits for every summary.
        "archive_retry_base_seconds": 1.0,
        "archive_retry_max_seconds": 10.0,
    }
    if not endpoint.fake:
        extra["llm_retry_base_seconds"] = 1.0
    if mode.live_window_tokens is not None:
        extra["live_window_tokens"] = mode.live_window_tokens
    return make_settings(f"sqlite+aiosqlite:///{data_dir / 'parley.db'}", data_dir, None, **extra)


@dataclass
class Stored:
    """A data dir holding the conversation, ready to be copied for each question."""

    data_dir: Path
    token: str  # the person's web chat token
    conversation_id: str
    archived_statements: set[str] = field(default_factory=set)
    chunks_per_level: dict[int, int] = field(default_factory=dict)
    live_tokens: int = 0


async def store(chat: Chat, data_dir: Path, endpoint: Endpoint, mode: Mode) -> Stored:
    """Write the chat into a fresh gateway's store, session by session; with
    `mode.archived`, let the archive cut, summarise and roll up after each session as
    turns would, and wait until every summary is in the timeline."""
    clock = ManualClock(chat.exchanges[0].at - timedelta(minutes=5))
    settings = _settings(data_dir, endpoint, mode)
    async with running_gateway(settings, clock=clock) as gw:
        token, conversation = await gw.visitor()
        services = gw.services
        conversation_id = uuid.UUID(conversation)
        identity_id = await _identity_of(services, conversation_id)
        memory = ArchiveMemory(
            services.archive,
            services.profiles,
            services.queue.enqueue,
            clock,
            archive_dir(settings),
        )
        seqs: dict[str, int] = {}
        for session in chat.sessions():
            for exchange in session:
                seq = await _add_exchange(services, clock, conversation_id, identity_id, exchange)
                if exchange.statement:
                    seqs[exchange.statement] = seq
            if mode.archived:
                await _archive_step(services, memory, conversation_id)
        stored = Stored(data_dir, token, conversation)
        if mode.archived:
            await _settle(services, memory, conversation_id)
            placed = await services.archive.placed(conversation_id, list(seqs.values()))
            stored.archived_statements = {
                sid for sid, seq in seqs.items() if placed[seq][1] is not None
            }
            for chunk in await services.archive.chunks(conversation_id):
                stored.chunks_per_level[chunk.level] = (
                    stored.chunks_per_level.get(chunk.level, 0) + 1
                )
        stored.live_tokens = (await services.archive.status(conversation_id)).live_tokens
    return stored


async def _identity_of(services: Services, conversation_id: uuid.UUID) -> uuid.UUID:
    """The web chat identity of the conversation's person (messages carry it)."""
    async with session_factory(services.engine)() as session:
        found = await session.scalar(
            select(Identity.id)
            .join(Conversation, Conversation.user_id == Identity.user_id)
            .where(Conversation.id == conversation_id, Identity.channel == CHANNEL)
        )
    if found is None:
        raise RuntimeError("the visitor has no identity")
    return found


async def _add_exchange(
    services: Services,
    clock: ManualClock,
    conversation_id: uuid.UUID,
    identity_id: uuid.UUID,
    exchange: Exchange,
) -> int:
    """Store the person's message and the assistant's answer as a web chat turn would
    (the answer replying to it, delivered by being stored); the user message's seq."""
    messages = services.repos.messages
    clock.advance(exchange.at - clock.now())
    typed = NewMessage(
        role=Role.USER,
        channel=CHANNEL,
        text=exchange.user,
        identity_id=identity_id,
        author_name=VISITOR_NAME,
    )
    stored, _ = await messages.add_message(conversation_id, typed, now=clock.now())
    clock.advance(timedelta(seconds=40))
    answer = NewMessage(
        role=Role.ASSISTANT,
        channel=CHANNEL,
        text=exchange.reply,
        reply_to_seq=stored.seq,
        delivery=Delivery.SENT,
    )
    await messages.add_message(conversation_id, answer, now=clock.now())
    return stored.seq


def _queue(services: Services) -> EmbeddedQueue:
    queue = services.queue
    assert isinstance(queue, EmbeddedQueue), "the bench runs the jobs in-process"
    return queue


async def _archive_step(
    services: Services, memory: ArchiveMemory, conversation_id: uuid.UUID
) -> None:
    """What the turns of a session leave behind: the cut after the last one (summaries
    and extraction run meanwhile), then the swap at the start of the next."""
    # The live-token figure only gets past after_turn's cheap pre-check: cut() measures
    # the unarchived messages itself.
    await memory.after_turn(conversation_id, sys.maxsize)
    await _drain(services, conversation_id)
    await memory.before_turn(conversation_id)
    await _drain(services, conversation_id)


async def _drain(services: Services, conversation_id: uuid.UUID) -> None:
    """Wait until no job is queued or running; give up on a summary that keeps failing
    (the archive would retry it for ever, and the bench would wait for ever)."""
    queue = _queue(services)
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_POLL_SECONDS):
                await queue.idle()
                return
        for chunk in await services.archive.chunks(conversation_id):
            if chunk.last_error and chunk.attempts >= FAILED_SUMMARY_ATTEMPTS:
                raise BenchError(
                    f"the summary of archive #{chunk.id} failed {chunk.attempts} times: "
                    f"{chunk.last_error}"
                )


async def _settle(services: Services, memory: ArchiveMemory, conversation_id: uuid.UUID) -> None:
    """Swap and roll up until no chunk waits for a summary and every ready one is in
    the timeline: the state a person returning days later would find."""
    settled = 0
    for _ in range(SETTLE_ROUNDS):
        await memory.before_turn(conversation_id)
        await _drain(services, conversation_id)
        status = await services.archive.status(conversation_id)
        settled = settled + 1 if status.pending_work == 0 else 0
        if settled == 2:  # one more swap after the last summary found nothing new
            return
    raise BenchError(f"the archive did not settle; last error: {status.last_error}")


@dataclass
class Answer:
    question: str
    kind: Kind
    archived: bool  # its statement lies below the summaries (in timeline and tools)
    expected: tuple[str, ...]
    reply: str
    correct: bool
    ambiguous: bool  # counted correct, yet it named the changed fact's other value too
    notice: bool  # the gateway answered with a notice (model down, lookups used up)
    model_calls: int
    tool_calls: int
    tools_used: list[str]
    usage_prompt_tokens: int | None  # None unless every call reported usage
    estimated_prompt_tokens: int
    seconds: float


@dataclass
class Asking:
    """What every question of a run is asked with."""

    chat: Chat
    endpoint: Endpoint
    proxy: RecordingProxy
    scratch: Path
    archived: set[str]  # statements below the summaries
    starting: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def ask(self, stored: Stored, mode: Mode, question: Question) -> Answer:
        """One question, on a fresh gateway over a fresh copy of the stored
        conversation: no question sees another's answer."""
        data_dir = self.scratch / f"{mode.name}-{question.id}"
        await asyncio.to_thread(shutil.copytree, stored.data_dir, data_dir)
        try:
            sent, lookups, calls, seconds = await self._exchange(stored, mode, question, data_dir)
        finally:
            await asyncio.to_thread(shutil.rmtree, data_dir, True)
        reply = (sent.json().get("reply") or {}) if sent.status_code == 200 else {}
        text = str(reply.get("text", ""))
        correct = names(text, question.answers)
        usages = [c.usage_prompt_tokens for c in calls]
        tools = [str(item["tool"]) for item in lookups]
        return Answer(
            question=question.text,
            kind=question.kind,
            archived=question.statement in self.archived,
            expected=question.answers,
            reply=text,
            correct=correct,
            ambiguous=correct and names(text, question.other),
            notice=reply.get("role") != "assistant",
            model_calls=len(calls),
            tool_calls=len(tools),
            tools_used=tools,
            usage_prompt_tokens=_total(usages) if calls else None,
            estimated_prompt_tokens=sum(c.estimated_prompt_tokens for c in calls),
            seconds=round(seconds, 3),
        )

    async def _exchange(
        self, stored: Stored, mode: Mode, question: Question, data_dir: Path
    ) -> tuple[httpx.Response, list[dict[str, Any]], list[ModelCall], float]:
        """Send the question as the person, over web chat; the answer, the lookups the
        turn made, its model calls and how long the answer took."""
        settings = _settings(data_dir, self.endpoint, mode)
        persona_head = load_persona(settings.persona_file).splitlines()[0]
        bearer = {"Authorization": f"Bearer {stored.token}"}
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with contextlib.AsyncExitStack() as stack:
            # Gateways start one at a time: each start runs the embedded migrations, and
            # alembic keeps its context in module globals, which two at once would break.
            async with self.starting:
                gateway = running_gateway(settings, clock=ManualClock(self.chat.asked_at))
                gw = await stack.enter_async_context(gateway)
            # The harness's own client waits 30 s; a slow model with tools takes longer.
            http = await stack.enter_async_context(
                httpx.AsyncClient(base_url=gw.url, timeout=settings.reply_wait_seconds + 30)
            )
            first = len(self.proxy.calls)
            started = time.monotonic()
            sent = await http.post(
                "/webchat/messages", json={"text": question.text}, headers=bearer
            )
            seconds = time.monotonic() - started
            sent.raise_for_status()
            lookups = await http.get(
                f"/api/v1/sessions/{stored.conversation_id}/lookups",
                params={"limit": 100},
                headers=admin,
            )
            lookups.raise_for_status()
        # Calls of other questions asked meanwhile (--parallel) and background jobs
        # (summaries, extraction) are not this turn's.
        calls = [c for c in self.proxy.calls[first:] if c.is_turn_for(question.text, persona_head)]
        return sent, list(lookups.json()["items"]), calls, seconds


def _total(values: Sequence[int | None]) -> int | None:
    """The sum, or None if any is unknown."""
    return None if None in values else sum(v for v in values if v is not None)


# -- the report ---------------------------------------------------------------------


@dataclass
class ModeResult:
    mode: str
    max_tool_calls: int
    context_tokens: int
    answers: list[Answer]
    token_source: str = "estimate"  # "server usage" where every call reported it

    @property
    def accuracy(self) -> float:
        return _share(self.answers)

    def accuracy_of(self, kinds: Sequence[Kind]) -> float | None:
        chosen = [a for a in self.answers if a.kind in kinds]
        return _share(chosen) if chosen else None

    @property
    def archived_accuracy(self) -> float | None:
        chosen = [a for a in self.answers if a.archived]
        return _share(chosen) if chosen else None

    @property
    def prompt_tokens_per_answer(self) -> float:
        if self.token_source == "server usage":
            return _mean([a.usage_prompt_tokens or 0 for a in self.answers])
        return _mean([a.estimated_prompt_tokens for a in self.answers])

    @property
    def model_calls_per_answer(self) -> float:
        return _mean([a.model_calls for a in self.answers])

    @property
    def tool_calls(self) -> int:
        return sum(a.tool_calls for a in self.answers)

    def summary(self) -> dict[str, Any]:
        return {
            "accuracy": round(self.accuracy, 3),
            "accuracy_by_kind": {k: self.accuracy_of(v) for k, v in KIND_GROUPS.items()},
            "accuracy_on_archived_facts": self.archived_accuracy,
            "prompt_tokens_per_answer": round(self.prompt_tokens_per_answer, 1),
            "token_source": self.token_source,
            "model_calls_per_answer": round(self.model_calls_per_answer, 2),
            "tool_calls": self.tool_calls,
            "notices": sum(a.notice for a in self.answers),
            "ambiguous": sum(a.ambiguous for a in self.answers),
            "seconds_per_answer": round(_mean([a.seconds for a in self.answers]), 3),
        }


@dataclass
class Report:
    machine: dict[str, Any]
    command: str
    model: str
    fake: bool
    scoring: str
    conversation: dict[str, Any]
    modes: list[ModeResult]
    parallel: int = 1
    baseline: str = "timeline"

    @property
    def questions(self) -> int:
        return len(self.modes[0].answers) if self.modes else 0

    def mode(self, name: str) -> ModeResult:
        return next(m for m in self.modes if m.mode == name)

    def ratios(self, name: str) -> dict[str, float | None]:
        """Accuracy and prompt tokens of a mode over the baseline's."""
        mode, base = self.mode(name), self.mode(self.baseline)
        return {
            "accuracy": _ratio(mode.accuracy, base.accuracy),
            "prompt_tokens": _ratio(mode.prompt_tokens_per_answer, base.prompt_tokens_per_answer),
        }

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for entry, mode in zip(data["modes"], self.modes, strict=True):
            entry.update(mode.summary(), vs_baseline=self.ratios(mode.mode))
        return data


def _share(answers: Sequence[Answer]) -> float:
    return sum(a.correct for a in answers) / len(answers) if answers else 0.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ratio(value: float, base: float) -> float | None:
    return round(value / base, 2) if base else None


def render(report: Report) -> str:
    conv = report.conversation
    lines = [
        "Recall quality: bench.recall",
        f"machine: {machine_line(report.machine)}; {report.machine['platform']}",
        f"command: {report.command}",
        f"model: {report.model}",
        f"conversation: {conv['messages']} messages ({conv['tokens']} tokens, estimated) "
        f"from {conv['first']} to {conv['last']}, seed {conv['seed']}; "
        f"{report.questions} questions ({conv['questions_by_kind']}), asked {conv['asked_at']}",
        f"archive (timeline, tools): chunks per level {conv['chunks_per_level']}, "
        f"{conv['live_tokens']} tokens live; {conv['archived_statements']} of "
        f"{conv['statements']} fact statements archived",
        f"scoring: {SCORING}",
        "tokens: prompt tokens per answer = the sum over every model call of the "
        "question's turn (source per mode below)",
        f"modes: each question on its own gateway over a fresh copy of the stored chat, "
        f"{report.parallel} at a time; timeline = summaries + profile + live window, no "
        f"tools; tools = the same archive + recall tools; full = the whole chat in the "
        f"prompt (nothing archived), no tools",
        "",
        f"{'mode':<9} {'tools':>5} {'accuracy':>8} {'detail':>6} {'changed':>7} {'when':>5} "
        f"{'archived':>8} {'prompt tok':>10} {'calls':>5} {'lookups':>7} "
        f"{'s/ans':>6}  vs {report.baseline} (acc, tok)",
    ]
    for mode in report.modes:
        ratios = report.ratios(mode.mode)
        lines.append(
            f"{mode.mode:<9} {mode.max_tool_calls:>5} {_pct(mode.accuracy):>8} "
            f"{_pct(mode.accuracy_of(KIND_GROUPS['detail'])):>6} "
            f"{_pct(mode.accuracy_of(KIND_GROUPS['changed'])):>7} "
            f"{_pct(mode.accuracy_of(KIND_GROUPS['when'])):>5} "
            f"{_pct(mode.archived_accuracy):>8} {mode.prompt_tokens_per_answer:>10.0f} "
            f"{mode.model_calls_per_answer:>5.1f} {mode.tool_calls:>7} "
            f"{_mean([a.seconds for a in mode.answers]):>6.2f}  "
            f"{_x(ratios['accuracy'])}, {_x(ratios['prompt_tokens'])}"
        )
    lines += [
        "",
        "archived: accuracy on the questions whose answer was archived (below the "
        "summaries); calls: model calls per answer; lookups: recall tool calls in all",
        "prompt tok source: "
        + ", ".join(f"{m.mode} {m.token_source}" for m in report.modes)
        + "; notices: "
        + ", ".join(f"{m.mode} {sum(a.notice for a in m.answers)}" for m in report.modes)
        + "; ambiguous (counted correct, yet named the changed fact's other value too): "
        + ", ".join(f"{m.mode} {sum(a.ambiguous for a in m.answers)}" for m in report.modes),
    ]
    if report.fake:
        lines.append(
            "FAKE MODEL: these numbers come from a scripted fake and only prove the "
            "plumbing (archive, tools, token counting, scoring), not any model's recall."
        )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


# -- running ------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    fake: bool = False
    messages: int = 400
    months: int = 5
    seed: int = 7
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    max_tool_calls: int = 6
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    timeout: float = 120.0
    parallel: int = 1  # questions asked at once (each on its own gateway)
    kinds: tuple[str, ...] = KINDS  # which questions to ask
    json_path: Path | None = None
    command: str = "python -m bench.recall"


async def run(options: Options) -> Report | None:
    """The whole benchmark; None (after saying why) when no model can be reached."""
    chat = generate(options.messages, options.months, options.seed)
    asked = tuple(q for q in chat.questions if q.kind in options.kinds)
    if not asked:
        raise ValueError(f"no questions of the kinds {options.kinds}; kinds: {KINDS}")
    chat = replace(chat, questions=asked)
    if options.fake:
        async with fake_llm() as fake:
            fake.responder = ScriptedModel(chat.questions)
            label = "scripted fake (tests/fakes/llm_server.py, bench.recall.ScriptedModel)"
            return await _run_against(options, chat, fake.openai_base, None, "fake-model", label)
    base_url = options.base_url or os.environ.get("PARLEY_LLM_BASE_URL")
    api_key = options.api_key or os.environ.get("PARLEY_LLM_API_KEY")
    model = options.model or os.environ.get("PARLEY_LLM_MODEL")
    if not base_url or not model:
        print(
            "skipped: no model reachable at (none configured): set PARLEY_LLM_BASE_URL and "
            "PARLEY_LLM_MODEL (or --base-url, --model), or run with --fake"
        )
        return None
    problem = await probe(base_url, api_key)
    if problem:
        print(f"skipped: no model reachable at {base_url} ({problem})")
        return None
    label = f"{model} at {base_url} (OpenAI-compatible)"
    return await _run_against(options, chat, base_url, api_key, model, label)


async def probe(base_url: str, api_key: str | None) -> str | None:
    """Why the endpoint cannot be used, or None if `GET /models` answers 2xx (OpenAI,
    vLLM, llama.cpp, Ollama and LM Studio all list their models there)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=PROBE_SECONDS) as client:
            answer = await client.get(f"{base_url.rstrip('/')}/models", headers=headers)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if not answer.is_success:
        return f"GET /models answered HTTP {answer.status_code}"
    return None


async def _ask_all(asking: Asking, stored: Stored, mode: Mode, options: Options) -> ModeResult:
    """Every question in one mode, `options.parallel` at a time."""
    slots = asyncio.Semaphore(options.parallel)

    async def one(question: Question) -> Answer:
        async with slots:
            return await asking.ask(stored, mode, question)

    answers = list(await asyncio.gather(*(one(q) for q in asking.chat.questions)))
    # The fake's usage is a placeholder: its token figures are always estimates.
    usage_known = not options.fake and all(a.usage_prompt_tokens is not None for a in answers)
    source = "server usage" if usage_known else "estimate"
    return ModeResult(mode.name, mode.max_tool_calls, mode.context_tokens, answers, source)


async def _run_against(
    options: Options, chat: Chat, upstream: str, api_key: str | None, model: str, label: str
) -> Report:
    all_modes = modes(options.context_tokens, options.max_tool_calls)
    async with recording_proxy(upstream) as (proxy, proxy_url):
        endpoint = Endpoint(proxy_url, api_key, model, options.timeout, options.fake)
        with tempfile.TemporaryDirectory(prefix="bench-recall-") as root:
            scratch = Path(root)
            archived_mode = all_modes[0]
            full_mode = all_modes[2]
            archived = await store(chat, scratch / "archived", endpoint, archived_mode)
            whole = await store(chat, scratch / "whole", endpoint, full_mode)
            asking = Asking(chat, endpoint, proxy, scratch, archived.archived_statements)
            results = [
                await _ask_all(asking, archived if mode.archived else whole, mode, options)
                for mode in all_modes
            ]
    kinds: dict[str, int] = {}
    for question in chat.questions:
        kinds[question.kind] = kinds.get(question.kind, 0) + 1
    return Report(
        machine=machine(),
        command=options.command,
        model=label,
        fake=options.fake,
        scoring=SCORING,
        conversation={
            "messages": chat.messages,
            "tokens": chat.tokens,
            "first": f"{chat.exchanges[0].at:%Y-%m-%d}",
            "last": f"{chat.exchanges[-1].at:%Y-%m-%d}",
            "asked_at": f"{chat.asked_at:%Y-%m-%d %H:%M}",
            "seed": options.seed,
            "questions_by_kind": ", ".join(f"{n} {k}" for k, n in kinds.items()),
            "statements": sum(1 for e in chat.exchanges if e.statement),
            "archived_statements": len(archived.archived_statements),
            "chunks_per_level": dict(sorted(archived.chunks_per_level.items())),
            "live_tokens": archived.live_tokens,
            "context_tokens": options.context_tokens,
        },
        modes=results,
        parallel=options.parallel,
    )


def parse_args(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.recall", description=DESCRIPTION)
    parser.add_argument("--fake", action="store_true", help="play the model with a scripted fake")
    parser.add_argument("--messages", type=int, default=Options.messages)
    parser.add_argument("--months", type=int, default=Options.months)
    parser.add_argument("--seed", type=int, default=Options.seed)
    parser.add_argument(
        "--context-tokens",
        type=int,
        default=Options.context_tokens,
        help="PARLEY_LLM_CONTEXT_TOKENS of the timeline and tools modes",
    )
    parser.add_argument("--max-tool-calls", type=int, default=Options.max_tool_calls)
    parser.add_argument("--base-url", help="default: $PARLEY_LLM_BASE_URL (with /v1)")
    parser.add_argument("--api-key", help="default: $PARLEY_LLM_API_KEY")
    parser.add_argument("--model", help="default: $PARLEY_LLM_MODEL")
    parser.add_argument("--timeout", type=float, default=Options.timeout, help="per model call")
    parser.add_argument(
        "--parallel", type=int, default=Options.parallel, help="questions asked at once"
    )
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="questions to ask, of these kinds (comma-separated): " + ",".join(KINDS),
    )
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the results here")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if args.messages < MIN_MESSAGES:
        parser.error(f"--messages must be at least {MIN_MESSAGES}")
    if args.months < 1:
        parser.error("--months must be at least 1")
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--kinds takes some of {','.join(KINDS)}")
    shown = [a if not a.startswith("--api-key=") else "--api-key=REDACTED" for a in argv]
    if "--api-key" in shown:
        shown[shown.index("--api-key") + 1] = "REDACTED"  # never print a secret
    return Options(
        fake=args.fake,
        messages=args.messages,
        months=args.months,
        seed=args.seed,
        context_tokens=args.context_tokens,
        max_tool_calls=args.max_tool_calls,
        base_url=args.base_url,
        api_key=args.api_key,
        model=args.model,
        timeout=args.timeout,
        parallel=max(1, args.parallel),
        kinds=kinds,
        json_path=args.json_path,
        command=shlex.join(["python", "-m", "bench.recall", *shown]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging("warning")  # the gateways' request lines would bury the table
    try:
        report = asyncio.run(run(options))
    except BenchError as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 1
    if report is None:
        return 0
    print(render(report))
    if options.json_path is not None:
        options.json_path.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
