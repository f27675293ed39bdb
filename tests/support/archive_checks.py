"""Checks of what the model was shown against what the archive holds."""

from __future__ import annotations

import itertools
import re
import uuid
from typing import Any

from sqlalchemy import select

from gateway.jobs.queue import EmbeddedQueue
from gateway.services import Services
from memory.archive.reads import ChunkView
from memory.storage.engine import session_factory
from memory.storage.models import Message
from tests.support.harness import ADMIN_TOKEN, Gateway
from tests.support.polling import eventually

ARCHIVE_ROW = re.compile(r"\(archive #(\d+), level \d+\)")
MARKER = re.compile(r"\bm(\d{5})\b")


def request_kind(body: dict[str, Any]) -> str:
    """What a model request is for: a turn, a summary or a profile extraction."""
    system = str(body["messages"][0]["content"])
    if system.startswith("You maintain a profile"):
        return "extract"
    if system.startswith("You keep the archive"):
        return "summary"
    return "chat"


def is_summary_request(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith("You keep the archive")


def is_chat_request(body: dict[str, Any]) -> bool:
    """A turn's request (the system prompt opens with the persona), not a background job."""
    return str(body["messages"][0]["content"]).startswith("# Who you are")


def chat_requests(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if is_chat_request(r)]


def marked_text(number: int, words: int) -> str:
    """A user message that names itself (`m00042`), padded to about `words` words."""
    filler = " ".join(f"w{(number * 7 + k) % 997}" for k in range(words))
    return f"m{number:05d} {filler}."


async def check_prompt(
    services: Services, conversation_id: uuid.UUID, request: dict[str, Any], seq_of: dict[int, int]
) -> None:
    """Every user message before the newest one shown lies in exactly one place: one
    timeline row's span, or the live messages — never both, never neither. But one:
    when the archive has fallen behind, the live window can outgrow the prompt, which
    then leaves out its oldest messages (DESIGN §4); those must still be live in the
    database (not archived, not swapped out of sight) and older than every message shown.

    Call it before the next turn starts: only a turn's start swaps chunks in, so the
    database's live window is the one the prompt was built from."""
    system = str(request["messages"][0]["content"])
    rows = [await services.archive.chunk(int(i)) for i in ARCHIVE_ROW.findall(system)]
    spans = sorted((r.seq_start, r.seq_end) for r in rows if r is not None)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end < start, f"timeline rows overlap: {spans}"
    # Every marker of a user turn: a provider joins consecutive user messages into one.
    live = {
        seq_of[int(n)]
        for m in request["messages"][1:]
        if m["role"] == "user"
        for n in MARKER.findall(str(m["content"]))
        if int(n) in seq_of
    }
    newest = max(live)
    unarchived = await _live_seqs(services, conversation_id)
    for number, seq in seq_of.items():
        if seq > newest:
            continue
        covered = sum(start <= seq <= end for start, end in spans)
        shown = seq in live
        if covered + shown == 0 and seq in unarchived and seq < min(live):
            continue  # left out of a full prompt, still in the live window
        assert covered + shown == 1, (
            f"message m{number:05d} (seq {seq}) is in {covered} rows and "
            f"{'is' if shown else 'is not'} live"
        )


async def _live_seqs(services: Services, conversation_id: uuid.UUID) -> set[int]:
    """The seqs of the conversation's live window as stored (no chunk swapped in)."""
    async with session_factory(services.engine)() as session:
        found = await session.scalars(
            select(Message.seq).where(
                Message.conversation_id == conversation_id, Message.chunk_id.is_(None)
            )
        )
        return set(found)


def check_levels(chunks: list[ChunkView]) -> None:
    """At every level, chunks never overlap, and each parent spans exactly its children."""
    by_level: dict[int, list[ChunkView]] = {}
    for chunk in chunks:
        by_level.setdefault(chunk.level, []).append(chunk)
    for level, members in by_level.items():
        members.sort(key=lambda c: c.seq_start)
        for a, b in itertools.pairwise(members):
            assert a.seq_end < b.seq_start, f"level {level} chunks {a.id} and {b.id} overlap"
    children: dict[int, list[ChunkView]] = {}
    for chunk in chunks:
        if chunk.parent_id is not None:
            children.setdefault(chunk.parent_id, []).append(chunk)
    for chunk in chunks:
        kids = sorted(children.get(chunk.id, []), key=lambda c: c.seq_start)
        if chunk.level == 0:
            assert not kids
            continue
        assert kids, f"chunk {chunk.id} has no children"
        assert (kids[0].seq_start, kids[-1].seq_end) == (chunk.seq_start, chunk.seq_end)


async def settle_extraction(gw: Gateway, conversation_id: uuid.UUID) -> None:
    """Until the conversation has archive chunks and every one has given its facts."""
    queue = gw.services.queue
    assert isinstance(queue, EmbeddedQueue)

    async def done() -> bool:
        await gw.services.runner.idle()
        await queue.idle()
        chunks = await gw.services.archive.chunks(conversation_id)
        return bool(chunks) and not await gw.services.archive.chunks_to_extract()

    await eventually(done, until=bool, seconds=30)


async def archived(
    gw: Gateway, token: str, conversation: str, words: str = ""
) -> list[dict[str, Any]]:
    """Send marked messages (with `words`) until the archive has a ready row; the
    timeline's rows, read through the operator API."""
    queue = gw.services.queue
    assert isinstance(queue, EmbeddedQueue)
    for number in range(1, 400):
        text = marked_text(number, 120) + (f" {words}" if words else "")
        assert (await gw.send(token, text)).status_code == 200
        await gw.services.runner.idle()
        await queue.idle()
        rows = await gw.http.get(
            f"/api/v1/sessions/{conversation}/timeline",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        if rows.json()["rows"]:
            return list(rows.json()["rows"])
    raise AssertionError("nothing was archived")
