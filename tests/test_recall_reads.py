"""Recall's reads below the summaries, on a real archive (SQLite and Postgres): search,
expand and read find a person's own words verbatim, never another conversation's, and
every answer stays within its budget."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from dataclasses import replace
from datetime import date

from sqlalchemy import update

from memory.archive.numbers import MemoryLimits
from memory.profile.profiles import Profiles
from memory.provenance import COMMAND_SOURCE, NOTICE_SOURCE
from memory.recall import ANSWER_TOKENS, SOURCE, Recall, Scope
from memory.storage.messages import NewMessage
from memory.storage.models import Chunk, Role
from memory.storage.search import COMMON_SAMPLE, HitKind
from memory.token_count import estimate_tokens
from memory.zones import zone
from tests.support.world import FILLER, MARKER, OTHER, World


def _recall(world: World) -> Recall:
    return Recall(world.archive, world.repos.search, Profiles(world.sessions))


def _ana(world: World) -> Scope:
    return Scope(world.ana.conversation_id, world.ana.user_id, "Europe/Lisbon")


def _group(world: World) -> Scope:
    return Scope(world.group, None, "UTC")


def _bo(world: World) -> Scope:
    return Scope(world.bo.conversation_id, world.bo.user_id, "UTC")


async def test_search_finds_archived_words_with_their_row_and_time(world: World) -> None:
    found = await _recall(world).search(_ana(world), f"{MARKER} number 7")

    assert found.startswith(SOURCE + "\n")
    # Message 7 of Ana's (the 8th) is seq 15: each message has its reply.
    hit = next(line for line in found.splitlines() if "message #15 " in line)
    assert re.search(r"\(in archive #\d+, user someone\)", hit)
    assert f"{MARKER} number 7 {FILLER}" in hit  # a short message, whole
    assert re.match(r"- 2026-03-01 \d\d:\d\d · ", hit)
    assert estimate_tokens(found) <= ANSWER_TOKENS


async def test_the_best_match_comes_first_however_many_newer_weaker_ones(world: World) -> None:
    conversation, bo = world.bo.conversation_id, world.bo.identity_id
    best = await world.say(conversation, bo, "discord", "qxdoor qxcode 4711: the qxdoor qxcode.")
    for n in range(45):  # newer, each with both words once, far apart
        await world.say(conversation, bo, "discord", f"qxdoor {FILLER} {n} qxcode")

    found = await _recall(world).search(_bo(world), "qxdoor qxcode")

    first = found.splitlines()[2]
    assert f"message #{best.seq} " in first, found
    assert "qxdoor qxcode 4711: the qxdoor qxcode." in first
    assert "of 46 messages and 0 archived transcripts that match" in found  # every one


async def test_a_search_with_no_hit_for_every_word_shows_hits_for_some(world: World) -> None:
    recall = _recall(world)

    some = await recall.search(_ana(world), f"{MARKER} qxneversaid")
    none = await recall.search(_ana(world), "qxneversaid qxnorthis")

    assert some.splitlines()[1] == (
        f"No message or transcript has all of: {MARKER} qxneversaid. Some of its words:"
    )
    assert f"{MARKER} number" in some
    assert none.endswith(
        "No message or transcript has all of: qxneversaid qxnorthis, nor any of its words."
    )


async def test_the_fallback_leaves_out_a_word_said_in_most_messages_and_says_so(
    world: World,
) -> None:
    conversation, bo = world.bo.conversation_id, world.bo.identity_id
    for n in range(COMMON_SAMPLE):
        await world.say(conversation, bo, "discord", f"qxeveryday chat {n}", reply=None)
    rare = await world.say(conversation, bo, "discord", "qxrareone at last", reply=None)
    recall = _recall(world)

    some = await recall.search(_bo(world), "qxeveryday qxrareone")
    none = await recall.search(_bo(world), "qxeveryday qxneversaid")
    alone = await recall.search(_bo(world), "qxeveryday")

    left_out = "(not searched for alone: qxeveryday; it is said in most messages)"
    assert some.splitlines()[1] == (
        f"No message or transcript has all of: qxeveryday qxrareone. Some of its words {left_out}:"
    )
    assert [line for line in some.splitlines() if line.startswith("- ")] == [
        next(line for line in some.splitlines() if f"message #{rare.seq} " in line)
    ]
    assert none.endswith(f"nor any of its words {left_out}.")
    # Asked for alone, it is searched for, and every message that has it counted.
    assert alone.splitlines()[1] == (
        f"The 8 best of {COMMON_SAMPLE} messages and 0 archived transcripts that match, best first:"
    )


async def test_search_leaves_out_commands_and_what_the_gateway_said(world: World) -> None:
    conversation, bo = world.bo.conversation_id, world.bo.identity_id
    said = world.repos.messages.add_message
    export = await world.say(conversation, bo, "discord", "/export qxcommandword", reply=None)
    await said(
        conversation,
        NewMessage(
            Role.EVENT,
            "discord",
            "Your export (qxlinkword), valid 24 h: https://parley.example/once/x1",
            source=COMMAND_SOURCE,
            reply_to_seq=export.seq,
        ),
        now=world.now(),
    )
    await said(
        conversation,
        NewMessage(Role.EVENT, "discord", "qxnoticeword: model down", source=NOTICE_SOURCE),
        now=world.now(),
    )
    await world.say(conversation, bo, "discord", "qxdialogueword, said and kept")
    for n in range(20):  # enough to archive all of it, into a transcript
        await world.say(conversation, bo, "discord", f"{OTHER} {n} {FILLER}")
    await world.archive_all(conversation)
    recall = _recall(world)
    gateway_words = ("qxcommandword", "qxlinkword", "qxnoticeword")

    found = {word: await recall.search(_bo(world), word) for word in gateway_words}
    mixed = await recall.search(_bo(world), "qxlinkword qxdialogueword")
    kept = await recall.search(_bo(world), "qxdialogueword")
    # The verbatim record (the REST search) still has them, message and transcript.
    record = [await world.repos.search.search(conversation, w, limit=5) for w in gateway_words]

    for word, answer in found.items():
        assert answer.endswith(f"No message or transcript has all of: {word}."), answer
    assert "qxlinkword" not in mixed.split("Some of its words:")[1]
    assert "qxdialogueword, said and kept" in mixed
    assert "message #" in kept
    assert [sorted(h.kind for h in hits) for hits in record] == [
        [HitKind.CHUNK, HitKind.MESSAGE]
    ] * len(gateway_words)


async def test_search_by_day_is_in_the_persons_time_zone(world: World) -> None:
    recall = _recall(world)
    that_day = await recall.search(_ana(world), MARKER, date(2026, 3, 1), date(2026, 3, 1))
    before = await recall.search(_ana(world), MARKER, None, date(2026, 2, 28))

    assert "message #" in that_day
    assert "No message or transcript" in before


async def test_read_gives_the_words_as_written_around_a_message(world: World) -> None:
    recall = _recall(world)
    chunks = [c for c in await world.archive.chunks(world.ana.conversation_id) if c.level == 0]
    row = next(c for c in chunks if c.seq_start <= 15 <= c.seq_end)

    window = await recall.read(_ana(world), row.id, around="15")
    by_words = await recall.read(_ana(world), row.id, around=f"{MARKER} number 7")

    assert f"{MARKER} number 7 {FILLER}" in window
    assert "#15 · 2026-03-01" in window
    assert window == by_words
    assert estimate_tokens(window) <= ANSWER_TOKENS


async def test_expand_opens_a_summary_one_level_down(world: World) -> None:
    recall = _recall(world)
    chunks = await world.archive.chunks(world.ana.conversation_id)
    parent = next(c for c in chunks if c.level == 1)
    children = await world.archive.children(parent.id)

    opened = await recall.expand(_ana(world), parent.id)
    leaf = await recall.expand(_ana(world), children[0].id)

    for child in children:
        assert f"(archive #{child.id}, level 0" in opened
    assert f"archive_read({children[0].id})" in leaf


async def test_expand_shows_every_child_of_default_size_summaries_in_a_share_each(
    world: World,
) -> None:
    chunks = await world.archive.chunks(world.ana.conversation_id)
    parent = next(c for c in chunks if c.level == 1)
    children = await world.archive.children(parent.id)
    # Summaries as long as a default one (about 1,500 tokens), each of its own words; the
    # last is short and needs no cutting.
    default = MemoryLimits().summary_tokens
    summaries = {child.id: _words(f"c{child.id}w", default) for child in children[:-1]}
    summaries[children[-1].id] = "A short one."
    async with world.sessions() as session:
        for child_id, summary in summaries.items():
            await session.execute(update(Chunk).where(Chunk.id == child_id).values(summary=summary))
        await session.commit()
    # Far east of UTC, so the days shown are the person's, not the server's.
    scope = Scope(world.ana.conversation_id, world.ana.user_id, "Pacific/Kiritimati")

    opened = await _recall(world).expand(scope, parent.id)

    assert estimate_tokens(opened) <= ANSWER_TOKENS
    tz = zone(scope.timezone)
    blocks = opened.split("\n\n")[1:]
    assert len(blocks) == len(children)
    share = ANSWER_TOKENS // len(children)
    for child, block in zip(children, blocks, strict=True):
        start = child.time_start.astimezone(tz).date()
        end = child.time_end.astimezone(tz).date()
        span = f"{start}" if start == end else f"{start} – {end}"
        head, shown = block.split("\n", 1)
        assert head == (
            f"## {span} (archive #{child.id}, level 0, "
            f"messages #{child.seq_start}–#{child.seq_end})"
        )
        if child is children[-1]:
            assert shown == "A short one."
            continue
        kept = re.fullmatch(
            rf"(.+)… \(summary cut for space; archive_read\({child.id}\) reads its messages\)",
            shown,
        )
        assert kept is not None, shown
        assert summaries[child.id].startswith(kept.group(1) + " ")  # cut after a whole word
        assert estimate_tokens(kept.group(1)) >= share // 2  # a fair part, not a scrap


def _words(prefix: str, tokens: int) -> str:
    """Numbered words, `prefix`1 on, about `tokens` long."""
    words: list[str] = []
    while estimate_tokens(" ".join(words)) < tokens:
        words.append(f"{prefix}{len(words) + 1}")
    return " ".join(words)


async def test_nobody_reads_another_conversation_whatever_they_ask(world: World) -> None:
    recall = _recall(world)
    ana_rows = await world.archive.chunks(world.ana.conversation_id)
    group_rows = await world.archive.chunks(world.group)

    by_bo = await recall.search(_bo(world), MARKER)
    by_group = await recall.search(_group(world), f"{MARKER} number")
    reads = [
        await recall.read(scope, row.id)
        for scope in (_bo(world), _group(world))
        for row in ana_rows
    ]
    expands = [await recall.expand(_bo(world), row.id) for row in ana_rows + group_rows]
    group_read = await recall.read(_group(world), next(r.id for r in group_rows if r.level == 0))

    assert "No message or transcript" in by_bo
    assert "No message or transcript" in by_group  # Ana's own words are not the group's
    assert all("No archive row" in answer for answer in reads + expands)
    assert f"{MARKER} group" in group_read or f"{OTHER} group" in group_read
    assert "number" not in group_read


async def test_retired_facts_are_a_persons_and_no_groups(world: World) -> None:
    recall = _recall(world)

    ana = await recall.retired_facts(_ana(world), "soup")
    group = await recall.retired_facts(_group(world), "soup")
    bo = await recall.retired_facts(_bo(world), "soup")

    assert f"likes {MARKER} soup very much" in ana
    assert "no retired facts" in group
    assert "No retired fact" in bo


async def test_one_very_long_message_does_not_blow_the_budget(world: World) -> None:
    conversation = world.bo.conversation_id
    long = await world.say(conversation, world.bo.identity_id, "discord", "lorem " * 5000)
    await world.archive_all(conversation)
    row = next(
        c
        for c in await world.archive.chunks(conversation)
        if c.level == 0 and c.seq_start <= long.seq <= c.seq_end
    )

    window = await _recall(world).read(_bo(world), row.id, around=str(long.seq))

    assert f"#{long.seq} · " in window
    assert "more characters)" in window
    assert estimate_tokens(window) <= ANSWER_TOKENS


async def test_a_smaller_answer_budget_shrinks_every_answer_to_it(world: World) -> None:
    recall = _recall(world)
    chunks = await world.archive.chunks(world.ana.conversation_id)
    row = next(c for c in chunks if c.level == 0 and c.seq_start <= 15 <= c.seq_end)
    parent = next(c for c in chunks if c.level == 1)
    async with world.sessions() as session:  # summaries as long as a default one
        for child in await world.archive.children(parent.id):
            summary = _words(f"c{child.id}w", MemoryLimits().summary_tokens)
            await session.execute(update(Chunk).where(Chunk.id == child.id).values(summary=summary))
        await session.commit()
    small = replace(_ana(world), answer_tokens=300)

    def answers(scope: Scope) -> list[Awaitable[str]]:
        return [
            recall.search(scope, MARKER),
            recall.read(scope, row.id, around="15"),
            recall.expand(scope, parent.id),
        ]

    wide = [await found for found in answers(_ana(world))]
    narrow = [await found for found in answers(small)]

    assert all(estimate_tokens(found) > 300 for found in wide)  # the budget shrank them
    assert all(estimate_tokens(found) <= 300 for found in narrow)
    searched, read, expanded = narrow
    assert "message #" in searched
    assert "#15 · 2026-03-01" in read  # still around the message asked for
    assert f"archive #{parent.id}" in expanded
