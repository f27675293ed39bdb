"""The checks, of the database and the fake Telegram's records: what was acknowledged is
stored exactly once and answered once; each reply was sent once (or, after a kill inside
a send, perhaps twice); every chunk is ready and its facts extracted, no two chunks of a
level overlap, each roll-up is made of consecutive children it spans exactly, and no
roll-up is left undone that the sweep should have started."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memory.archive.numbers import MemoryLimits
from tests.fakes.telegram_api import FakeTelegram
from tests.support.faults.snapshot import ChunkRow, Snapshot, StoredRow
from tests.support.faults.traffic import Inbound


def lost_and_doubled(sent: Sequence[Inbound], snap: Snapshot) -> tuple[list[str], list[str]]:
    """Acknowledged messages not stored, and messages stored more than once (by platform
    id, and by text: a second copy under another id would escape the first count)."""
    by_platform_id: Counter[str] = Counter()
    for row in snap.messages:
        if row.role == "user" and row.platform_id is not None:
            key = row.platform_id
            if row.channel == "webchat":
                key = key.rpartition(":")[2]  # "{visitor}:{client_id}"
            by_platform_id[f"{row.channel}/{key}"] += 1
    by_text = Counter(row.text for row in snap.messages if row.role == "user")
    lost = [
        f"{s.channel} {s.label}"
        for s in sent
        if s.acknowledged and by_platform_id[f"{s.channel}/{s.key}"] == 0
    ]
    doubled = []
    for s in sent:
        times = max(by_platform_id[f"{s.channel}/{s.key}"], by_text[s.text])
        if times > 1:
            doubled.append(f"{s.channel} {s.label} stored {times} times")
    return lost, doubled


def unanswered(snap: Snapshot) -> list[str]:
    """User messages with no reply (assistant or event) that answers them."""
    answered_up_to: dict[str, int] = defaultdict(int)
    for reply in snap.replies():
        assert reply.reply_to_seq is not None
        answered_up_to[reply.conversation] = max(
            answered_up_to[reply.conversation], reply.reply_to_seq
        )
    found = [
        f"conversation {m.conversation[:8]} seq {m.seq} ({m.text.partition(':')[0]})"
        for m in snap.messages
        if m.role == "user" and m.seq > answered_up_to[m.conversation]
    ]
    found += [f"conversation {c[:8]} owes a reply" for c in snap.owing]
    return found


def answered_twice(snap: Snapshot) -> list[str]:
    """Turns with more than one reply (replies to the same user seq)."""
    counts = Counter((r.conversation, r.reply_to_seq) for r in snap.replies())
    return [
        f"conversation {c[:8]} seq {seq}: {n} replies" for (c, seq), n in counts.items() if n > 1
    ]


@dataclass
class SendFindings:
    """The fake Telegram's record of sends, against the replies stored."""

    replies: int
    sends: int
    duplicates: dict[str, int]  # reply text: extra sends
    never_sent: list[str]
    not_recorded: list[str]  # delivery still pending/failed


def check_sends(telegram: FakeTelegram, snap: Snapshot) -> SendFindings:
    replies = [r for r in snap.replies() if r.channel == "telegram"]
    sent = Counter((c.params["chat_id"], c.params["text"]) for c in telegram.sent())
    texts_sent = {text for _, text in sent}
    return SendFindings(
        replies=len(replies),
        sends=sum(sent.values()),
        duplicates={text: n - 1 for (_, text), n in sent.items() if n > 1},
        never_sent=[f"{r.text!r} ({r.delivery})" for r in replies if r.text not in texts_sent],
        not_recorded=[
            f"{r.text!r} ({r.delivery})" for r in snap.replies() if r.delivery not in ("sent", None)
        ],
    )


def unrecorded_sends(taken: Iterable[str], snap: Snapshot) -> set[str]:
    """Of the texts Telegram `taken`, the replies the gateway had not recorded as sent."""
    recorded = {r.text for r in snap.replies() if r.channel == "telegram" and _recorded(r)}
    return set(taken) - recorded


def _recorded(row: StoredRow) -> bool:
    """The gateway recorded that the platform took (the first part of) this reply."""
    return row.parts_sent > 0 or row.delivery in ("sent", "delivered", "read")


Levels = dict[tuple[str, int], list[ChunkRow]]  # (conversation, level): chunks by seq


@dataclass
class ArchiveFindings:
    not_ready: list[str]
    overlaps: list[str]
    bad_rollups: list[str]
    facts_missing: list[str]
    rollups_due: list[str]
    per_level: Counter[int]


def check_archive(chunks: Sequence[ChunkRow], limits: MemoryLimits) -> ArchiveFindings:
    levels: Levels = defaultdict(list)
    for chunk in sorted(chunks, key=lambda c: (c.seq_start, c.id)):
        levels[(chunk.conversation, chunk.level)].append(chunk)
    return ArchiveFindings(
        not_ready=[
            f"chunk {c.id} (level {c.level}) {c.status}" for c in chunks if c.status != "ready"
        ],
        overlaps=overlaps(levels),
        bad_rollups=[bad for c in chunks if c.level > 0 and (bad := bad_rollup(c, levels))],
        facts_missing=[
            f"chunk {c.id}"
            for c in chunks
            if c.level == 0 and c.status == "ready" and not c.facts_extracted
        ],
        rollups_due=rollups_due(chunks, limits),
        per_level=Counter(c.level for c in chunks),
    )


def overlaps(levels: Levels) -> list[str]:
    return [
        f"level {a.level}: chunk {a.id} (seq {a.seq_start}-{a.seq_end}) and "
        f"chunk {b.id} (seq {b.seq_start}-{b.seq_end})"
        for rows in levels.values()
        for a, b in itertools.pairwise(rows)
        if a.seq_end >= b.seq_start
    ]


def bad_rollup(parent: ChunkRow, levels: Levels) -> str | None:
    """What is wrong with a roll-up's children: too few, not consecutive at their level,
    or not spanning exactly the parent's seqs."""
    siblings = levels[(parent.conversation, parent.level - 1)]
    positions = [i for i, c in enumerate(siblings) if c.parent_id == parent.id]
    kids = [siblings[i] for i in positions]
    span = f"chunk {parent.id} (level {parent.level}, seq {parent.seq_start}-{parent.seq_end})"
    if len(kids) < 2:
        return f"{span} has {len(kids)} children"
    if positions != list(range(positions[0], positions[0] + len(positions))):
        skipped = [siblings[i].id for i in range(positions[0], positions[-1]) if i not in positions]
        return f"{span} is made of chunks {[k.id for k in kids]}, skipping {skipped}"
    if (kids[0].seq_start, kids[-1].seq_end) != (parent.seq_start, parent.seq_end):
        return f"{span} does not span its children (seq {kids[0].seq_start}-{kids[-1].seq_end})"
    return None


def rollups_due(chunks: Sequence[ChunkRow], limits: MemoryLimits) -> list[str]:
    """Levels whose oldest parentless chunks form a run long enough to roll up: a run of
    ready chunks (level 0: swapped into the timeline), oldest first, none skipped."""
    roots: Levels = defaultdict(list)
    for chunk in sorted(chunks, key=lambda c: c.seq_start):
        if chunk.parent_id is None:
            roots[(chunk.conversation, chunk.level)].append(chunk)
    due = []
    for (conversation, level), rows in sorted(roots.items()):
        run = list(
            itertools.takewhile(
                lambda c: c.status == "ready" and (c.level > 0 or c.in_timeline), rows
            )
        )
        threshold = (
            limits.consolidate_at if level == 0 else limits.rollup_keep + limits.rollup_batch
        )
        if len(run) >= threshold:
            due.append(f"conversation {conversation[:8]} level {level}: {len(run)} ready roots")
    return due
