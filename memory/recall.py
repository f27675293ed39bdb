"""Recall: how the model reads below its own summaries, one conversation at a time.

Each way in takes the conversation it may read as an argument the runtime supplies, never
one the model names, and checks every id it is given against it: a row of another
conversation is "not found", exactly like one that does not exist. Every answer is plain
text for the model, behind a `[source: archive]` line, bounded in tokens, with times in
the person's time zone. A message read out stands under a bracketed header the gateway
writes (`[#15 · 2026-07-01 12:00 · telegram · user Ann]`) and its text is escaped, so no
line of it passes for one (`memory.provenance`); everything else quoted (hits, facts,
the query) is put on one line.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from memory.archive.reads import ArchiveReads, ChunkView
from memory.archive.transcript import speaker
from memory.escaping import escape_typed
from memory.profile.profiles import Profiles
from memory.provenance import NOT_DIALOGUE, dialogue, header
from memory.storage.messages import StoredMessage
from memory.storage.search import (
    ELLIPSIS,
    MAX_WORDS,
    RANKED,
    HitKind,
    Ranked,
    Search,
    SearchHit,
    search_words,
)
from memory.token_count import estimate_tokens, shares, shorten
from memory.zones import zone

SOURCE = header("source", "archive")
# What one answer may cost the prompt; a turn makes a few (PARLEY_LLM_MAX_TOOL_CALLS).
# A turn on a small model asks for less (`Scope.answer_tokens`).
ANSWER_TOKENS = 1200
SEARCH_HITS = 8
# Of each kind, the best this many are read: transcripts that only repeat a message hit
# give way to the next.
SEARCH_CANDIDATES = 2 * SEARCH_HITS
RETIRED_FACTS = 20
# A message hit up to this long is shown whole rather than as a snippet.
WHOLE_MESSAGE_CHARS = 400
# A message read longer than this is cut (the answer's budget is about 4 characters a
# token), or than fits a smaller answer with its heading and the read's intro.
BLOCK_CHARS = 3000
BLOCK_OVERHEAD_TOKENS = 200


@dataclass(frozen=True, slots=True)
class Scope:
    """What a turn may read: its own conversation, and its person's retired facts (none
    for a group)."""

    conversation_id: uuid.UUID
    user_id: uuid.UUID | None
    timezone: str
    # What one answer may cost the prompt: less than ANSWER_TOKENS where the turn's
    # tool rounds have less room.
    answer_tokens: int = ANSWER_TOKENS


class Recall:
    def __init__(self, reads: ArchiveReads, search: Search, profiles: Profiles) -> None:
        self._reads = reads
        self._search = search
        self._profiles = profiles

    async def search(
        self, scope: Scope, query: str, start: date | None = None, end: date | None = None
    ) -> str:
        """The best hits for every word of `query` (else, saying so, for some of them,
        not those said in most messages), messages and transcripts of the dialogue
        however old, between the days `start` and `end` (both included, in the
        person's time zone)."""
        if not search_words(query):
            return answer("Nothing to search for: give a few words that were said.")
        tz = zone(scope.timezone)
        since = None if start is None else datetime.combine(start, time(), tz)
        until = None if end is None else datetime.combine(end + timedelta(days=1), time(), tz)
        found, loose = await self._found(scope, query, since, until)
        shown = _one_line(query)[:200]
        hits = _best(found)
        common = _common(found.common)
        if not hits:
            nor = f", nor any of its words{common}" if loose else ""
            return answer(f"No message or transcript has all of: {shown}{nor}.")
        placed = await self._reads.placed(
            scope.conversation_id, [h.seq for h in hits if h.seq is not None]
        )
        lines = [
            f"The {len(hits)} best of {_count(found.message_count, HitKind.MESSAGE)} messages "
            f"and {_count(found.chunk_count, HitKind.CHUNK)} archived transcripts that match, "
            "best first:"
        ]
        if loose:
            lines.insert(
                0, f"No message or transcript has all of: {shown}. Some of its words{common}:"
            )
        for hit in hits:
            when = f"{hit.time.astimezone(tz):%Y-%m-%d %H:%M}"
            if hit.kind is HitKind.CHUNK:
                where = (
                    f"archive #{hit.chunk_id} transcript, messages #{hit.seq_start}–#{hit.seq_end}"
                )
                lines.append(f"- {when} · {where}: {_one_line(hit.snippet)}")
            elif hit.seq in placed:  # else deleted since the search
                lines.append(f"- {when} · {_message_hit(hit, *placed[hit.seq])}")
        lines.append("Read around a hit with archive_read(chunk_id, around=<message number>).")
        return answer(_fit(lines, scope.answer_tokens, separator="\n"))

    async def _found(
        self, scope: Scope, query: str, since: datetime | None, until: datetime | None
    ) -> tuple[Ranked, bool]:
        """The best hits for every word of `query`; if none has every word, for any
        (True: it came to that)."""
        for any_word in (False, True):
            found = await self._search.best(
                scope.conversation_id,
                query,
                limit=SEARCH_CANDIDATES,
                start=since,
                end=until,
                any_word=any_word,
                left_out=NOT_DIALOGUE,  # what a model reads of the conversation, no more
            )
            if found.messages or found.chunks or len(search_words(query)) == 1:
                break
        return found, any_word

    async def expand(self, scope: Scope, row_id: int) -> str:
        """The rows a timeline row summarises, one level down."""
        row = await self._row(scope, row_id)
        if row is None:
            return answer(f"No archive row #{row_id} in this conversation.")
        if row.level == 0:
            return answer(
                f"archive #{row_id} is a level-0 row: it has no summaries below it. "
                f"Read its words with archive_read({row_id})."
            )
        children = await self._reads.children(row_id)
        tz = zone(scope.timezone)
        intro = (
            f"archive #{row_id} (level {row.level}, {_span(row, tz)}) summarises "
            f"{len(children)} rows:"
        )
        return answer(_children(intro, children, tz, scope.answer_tokens))

    async def read(self, scope: Scope, chunk_id: int, around: str | None = None) -> str:
        """A window of a level-0 row's messages as they were written: from the start, or
        around a message number or the first message with the words `around`."""
        row = await self._row(scope, chunk_id)
        if row is None:
            return answer(f"No archive row #{chunk_id} in this conversation.")
        if row.level > 0:
            return answer(
                f"archive #{chunk_id} is a summary (level {row.level}); expand it with "
                f"archive_expand({chunk_id}) to find the level-0 rows, then read one of those."
            )
        messages = dialogue(await self._reads.messages_of(chunk_id))
        if not messages:
            return answer(f"archive #{chunk_id} holds no dialogue.")
        tz = zone(scope.timezone)
        chars = min(BLOCK_CHARS, 4 * max(100, scope.answer_tokens - BLOCK_OVERHEAD_TOKENS))
        blocks = [_block(m, tz, chars) for m in messages]
        centre = _centre(messages, around)
        first, last = _window(
            [estimate_tokens(b) for b in blocks], centre, scope.answer_tokens - 100
        )
        shown = messages[first : last + 1]
        intro = (
            f"archive #{chunk_id}, {_span(row, tz)}, messages #{messages[0].seq}–#{messages[-1].seq}; "
            f"showing #{shown[0].seq}–#{shown[-1].seq}:"
        )
        if around and centre is None:
            intro = f"Nothing in archive #{chunk_id} matches {around[:100]!r}. " + intro
        return answer("\n\n".join([intro, *blocks[first : last + 1]]))

    async def retired_facts(self, scope: Scope, query: str) -> str:
        """Facts the profile once held and let go, with when and why."""
        if scope.user_id is None:
            return answer("A group conversation has no profile, so no retired facts.")
        words = [w.casefold() for w in search_words(query)][:MAX_WORDS]
        facts = await self._profiles.retired(scope.user_id)
        matching = [f for f in facts if all(w in f.text.casefold() for w in words)]
        if not matching:
            return answer(f"No retired fact has all of: {_one_line(query)[:200]}")
        tz = zone(scope.timezone)
        lines = [
            f"- retired {f.retired_at.astimezone(tz):%Y-%m-%d} ({_one_line(f.reason)}): "
            f"{_one_line(f.text)}"
            for f in reversed(matching[-RETIRED_FACTS:])
        ]
        head = f"{len(matching)} retired facts match, newest first:"
        return answer(_fit([head, *lines], scope.answer_tokens))

    async def _row(self, scope: Scope, row_id: int) -> ChunkView | None:
        row = await self._reads.chunk(row_id)
        if row is None or row.conversation_id != scope.conversation_id:
            return None
        return row


def _best(found: Ranked) -> list[SearchHit]:
    """The best message hits, then transcripts that add something (words spread over
    several messages): a word said is found as a message and again in its transcript."""
    picked = found.messages[:SEARCH_HITS]
    seqs = {h.seq for h in picked}
    for hit in found.chunks:
        if len(picked) >= SEARCH_HITS:
            break
        low, high = hit.seq_start or 0, hit.seq_end or 0
        if not any(s is not None and low <= s <= high for s in seqs):
            picked.append(hit)
    return picked


def _count(found: int, kind: HitKind) -> str:
    return f"at least {found}" if found >= RANKED[kind] else str(found)


def _common(words: Sequence[str]) -> str:
    """What an any-word search left out, as its answer says it."""
    if not words:
        return ""
    said = "it is" if len(words) == 1 else "they are"
    return f" (not searched for alone: {' '.join(words)}; {said} said in most messages)"


def _message_hit(hit: SearchHit, message: StoredMessage, chunk: int | None) -> str:
    where = "recent" if chunk is None else f"in archive #{chunk}"
    # A short message whole, word for word; a long one by its snippet.
    words = message.text if len(message.text) <= WHOLE_MESSAGE_CHARS else hit.snippet
    return f"message #{message.seq} ({where}, {speaker(message)}): {escape_typed(_one_line(words))}"


def _block(message: StoredMessage, tz: tzinfo, chars: int) -> str:
    when = message.sent_at.astimezone(tz)
    head = f"[#{message.seq} · {when:%Y-%m-%d %H:%M} · {message.channel} · {speaker(message)}]"
    text = message.text
    if len(text) > chars:  # one long message must not blow the answer's budget
        text = f"{text[:chars]}… ({len(text) - chars} more characters)"
    return f"{head}\n{escape_typed(text)}"


def _centre(messages: Sequence[StoredMessage], around: str | None) -> int | None:
    """Index of the message `around` names: its number (`123` or `#123`), else the first
    with all its words; None if nothing does."""
    if not around or not around.strip():
        return None
    wanted = around.strip().removeprefix("#")
    if wanted.isdigit():
        seq = int(wanted)
        return next((i for i, m in enumerate(messages) if m.seq >= seq), len(messages) - 1)
    words = [w.casefold() for w in around.split()]
    return next(
        (i for i, m in enumerate(messages) if all(w in m.text.casefold() for w in words)), None
    )


def _window(sizes: Sequence[int], centre: int | None, budget: int) -> tuple[int, int]:
    """First and last index of the most blocks around `centre` (or from the start) that
    fit `budget`; always at least one."""
    first = last = centre or 0
    used = sizes[first]
    while True:
        grew = False
        for step in (-1, 1) if centre is not None else (1,):
            i = first - 1 if step < 0 else last + 1
            if 0 <= i < len(sizes) and used + sizes[i] <= budget:
                used += sizes[i]
                first, last = min(first, i), max(last, i)
                grew = True
        if not grew:
            return first, last


def _fit(blocks: Iterable[str], budget: int, separator: str = "\n\n") -> str:
    """Blocks in order until the answer's budget is spent; says how many were left out."""
    kept: list[str] = []
    used = 0
    items = list(blocks)
    for block in items:
        size = estimate_tokens(block)
        if kept and used + size > budget - 50:
            kept.append(f"({len(items) - len(kept)} more left out for space.)")
            break
        kept.append(block)
        used += size
    return separator.join(kept)


def _children(intro: str, children: Sequence[ChunkView], tz: tzinfo, budget: int) -> str:
    """Every child's heading (id, level, days, messages), each with as much of its
    summary as a fair share of the answer's budget holds: a short summary leaves its
    unused share to the longer ones, and one cut says so and where to read on."""
    heads = [
        f"## {_span(c, tz)} (archive #{c.id}, level {c.level}, "
        f"messages #{c.seq_start}–#{c.seq_end})"
        for c in children
    ]
    texts = [(c.summary or "(not summarised yet)").strip() for c in children]
    notes = [_read_on(c) for c in children]
    # Each block is its heading, a newline, its text and a cut note, and the blank line
    # that joins it to the next; counting the parts apart never counts less than whole.
    fixed = estimate_tokens(f"{intro}\n\n") + sum(
        estimate_tokens(f"{head}\n\n\n") + estimate_tokens(note)
        for head, note in zip(heads, notes, strict=True)
    )
    given = shares([estimate_tokens(t) for t in texts], budget - 50 - fixed)
    blocks = [intro]
    for head, text, note, share in zip(heads, texts, notes, given, strict=True):
        shown = shorten(text, share, ELLIPSIS)
        if shown != text:
            shown = f"{shown}{note}".strip()
        blocks.append(f"{head}\n{shown}")
    return "\n\n".join(blocks)


def _read_on(row: ChunkView) -> str:
    if row.level == 0:
        return f" (summary cut for space; archive_read({row.id}) reads its messages)"
    return f" (summary cut for space; archive_expand({row.id}) opens the rows below it)"


def _span(row: ChunkView, tz: tzinfo) -> str:
    start = row.time_start.astimezone(tz).date()
    end = row.time_end.astimezone(tz).date()
    return f"{start}" if start == end else f"{start} – {end}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def answer(text: str) -> str:
    """`text` as the model reads a tool's answer: behind the archive's source line."""
    return f"{SOURCE}\n{text}"
