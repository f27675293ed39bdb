"""Identity linking: `/link` on one channel, `/link CODE` on another, one conversation in
time order that the next turn on either channel sees; bad codes, groups and `/unlink`."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.profile.facts import Evidence, Fact
from memory.profile.profiles import Profiles
from memory.storage.engine import create_engine, session_factory
from memory.storage.linking import LinkStatus
from memory.storage.messages import NewMessage
from memory.storage.models import Chunk, Conversation, Delivery, Message, Profile, Role, User
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.clock import ManualClock
from tests.support.platforms import Platforms, platform_gateway
from tests.support.polling import eventually

TG_USER = 700
WA_USER = "15550007000"
LINK_CODE = re.compile(r"link code is ([A-Z0-9]{8})")


def _prompt(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"])


async def _tg_say(p: Platforms, text: str, user: int = TG_USER) -> str:
    before = len(p.tg.texts(user))
    assert (await p.telegram(tg.text_update(user, text))).status_code == 200
    await p.tg.wait_until(lambda f: len(f.texts(user)) > before)
    return p.tg.texts(user)[-1]


async def _wa_say(p: Platforms, text: str, person: str = WA_USER) -> str:
    before = len(p.wa.texts(person))
    assert (await p.whatsapp(wa.message_notification(person, text=text))).status_code == 200
    await p.wa.wait_until(lambda f: len(f.texts(person)) > before)
    return p.wa.texts(person)[-1]


def _code(answer: str) -> str:
    match = LINK_CODE.search(answer)
    assert match, answer
    return match.group(1)


@contextlib.asynccontextmanager
async def _storage(
    database_url: str,
) -> AsyncIterator[tuple[async_sessionmaker[AsyncSession], Repositories]]:
    engine = create_engine(database_url)
    try:
        sessions = session_factory(engine)
        yield (
            sessions,
            Repositories.open(sessions, count_tokens=message_tokens, now=lambda: datetime.now(UTC)),
        )
    finally:
        await engine.dispose()


async def test_after_linking_the_next_whatsapp_turn_sees_the_telegram_history(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await _tg_say(p, "My cat is called Tom.")
        await _wa_say(p, "Hello from WhatsApp.")
        code = _code(await _tg_say(p, "/link"))
        linked = await _wa_say(p, f"/link {code}")
        await _wa_say(p, "What is my cat called?")
        whatsapp_turn = llm.requests[-1]
        await _tg_say(p, "And on Telegram?")
        telegram_turn = llm.requests[-1]
        sessions = await p.sessions()
        # The platform has the last reply; its delivery is recorded just after.
        history = await eventually(
            lambda: p.messages(sessions[0]["id"]),
            until=lambda ms: all(m["delivery"] in ("sent", None) for m in ms),
        )

    assert linked.startswith("Linked")
    assert "My cat is called Tom." in _prompt(whatsapp_turn)
    assert "Hello from WhatsApp." in _prompt(whatsapp_turn)
    assert "What is my cat called?" in _prompt(telegram_turn)
    assert len(sessions) == 1
    # One history, in the order things happened, nothing lost, seqs without gaps.
    assert [m["seq"] for m in history] == list(range(1, len(history) + 1))
    assert [m["created_at"] for m in history] == sorted(m["created_at"] for m in history)
    assert [(m["channel"], m["text"]) for m in history if m["role"] == "user"] == [
        ("telegram", "My cat is called Tom."),
        ("whatsapp", "Hello from WhatsApp."),
        ("telegram", "/link"),
        ("whatsapp", f"/link {code}"),
        ("whatsapp", "What is my cat called?"),
        ("telegram", "And on Telegram?"),
    ]
    assert sum(m["role"] != "user" for m in history) == 6  # every message got its answer
    # The code went out on Telegram; the confirmation on WhatsApp, where it was asked.
    assert any(code in text for text in p.tg.texts(TG_USER))
    assert all(m["delivery"] in ("sent", None) for m in history)


async def test_wrong_expired_reused_and_group_codes_get_a_clear_answer(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    clock = ManualClock(datetime.now(UTC))
    async with platform_gateway(database_url, tmp_path, llm, clock=clock) as p:
        unknown = await _wa_say(p, "/link ABCD2345")
        stale = _code(await _tg_say(p, "/link"))
        clock.advance(timedelta(minutes=11))
        expired = await _wa_say(p, f"/link {stale}")
        code = _code(await _tg_say(p, "/link"))
        linked = await _wa_say(p, f"/link {code}")
        reused = await _wa_say(p, f"/link {code}", person="15550008000")
        again = await _wa_say(p, f"/link {_code(await _tg_say(p, '/link'))}")
        group = tg.group_chat()
        await p.telegram(tg.text_update(TG_USER, f"/link@{tg.BOT_USERNAME}", chat=group))
        await p.tg.wait_until(lambda f: len(f.texts(group["id"])) == 1)

    assert "don't know that code" in unknown
    assert "expired" in expired
    assert linked.startswith("Linked")
    assert "already been used" in reused
    assert "already part of that conversation" in again
    assert "private chat" in p.tg.texts(group["id"])[0]
    assert llm.requests == []  # commands never reach the model


async def test_unlink_gives_the_channel_a_conversation_of_its_own(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        nothing = await _wa_say(p, "/unlink")
        await _tg_say(p, "My cat is called Tom.")
        await _wa_say(p, f"/link {_code(await _tg_say(p, '/link'))}")
        unlinked = await _wa_say(p, "/unlink")
        await _wa_say(p, "Do you know my cat?")
        after = llm.requests[-1]
        await _tg_say(p, "Still here on Telegram.")
        sessions = await p.sessions()

    assert "nothing to unlink" in nothing
    assert unlinked.startswith("Unlinked")
    assert "Tom" not in _prompt(after)
    assert "My cat is called Tom." in _prompt(llm.requests[-1])
    assert len(sessions) == 2


# -- the merge itself ------------------------------------------------------------------


async def test_a_merge_interleaves_by_arrival_keeps_replies_with_their_questions_and_drops_chunks(
    database_url: str,
) -> None:
    async with _storage(database_url) as (sessions, repos):
        t0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

        async def identity(channel: str, external: str) -> Any:
            return await repos.identities.resolve_identity(
                channel, external, display_name="Sam", timezone="UTC", now=t0
            )

        a, b = await identity("telegram", "1"), await identity("whatsapp", "2")

        async def say(ref: Any, channel: str, minute: int, text: str, reply: bool = True) -> None:
            user, _ = await repos.messages.add_message(
                ref.conversation_id,
                NewMessage(Role.USER, channel, text, identity_id=ref.identity_id),
                now=t0 + timedelta(minutes=minute),
            )
            if reply:
                await repos.messages.add_message(
                    ref.conversation_id,
                    NewMessage(
                        Role.ASSISTANT,
                        channel,
                        f"re: {text}",
                        reply_to_seq=user.seq,
                        delivery=Delivery.SENT,
                    ),
                    now=t0 + timedelta(minutes=minute, seconds=30),
                )

        await say(a, "telegram", 1, "a1")
        await say(b, "whatsapp", 2, "b1")
        await say(a, "telegram", 3, "a2")
        await say(b, "whatsapp", 4, "b2")
        await say(b, "whatsapp", 10, "/link CODE", reply=False)
        async with sessions() as session:
            chunk = Chunk(
                conversation_id=a.conversation_id, level=0, seq_start=1, seq_end=2,
                time_start=t0, time_end=t0, transcript="a1", status="ready",
            )  # fmt: skip
            session.add(chunk)
            await session.flush()
            await session.execute(
                update(Message)
                .where(Message.conversation_id == a.conversation_id, Message.seq <= 2)
                .values(chunk_id=chunk.id)
            )
            await session.commit()
        code = await repos.links.issue_link_code(
            a.identity_id, now=t0 + timedelta(minutes=5), ttl=timedelta(minutes=10)
        )
        (trigger,) = await repos.messages.messages_after(b.conversation_id, 4, 10)
        result = await repos.links.redeem_link_code(
            code, b.identity_id, now=t0 + timedelta(minutes=10), answering_message_id=trigger.id
        )
        merged = await repos.messages.messages_after(a.conversation_id, 0, 100)
        moved_trigger = await repos.messages.message_by_id(trigger.id)
        async with sessions() as session:
            chunks = await session.scalar(select(func.count()).select_from(Chunk))
            gone = await session.get(Conversation, b.conversation_id)
            survivor = await session.get(Conversation, a.conversation_id)
        ref = await identity("whatsapp", "2")
        turn = await repos.conversations.load_turn(a.conversation_id)

    assert result.status is LinkStatus.LINKED
    assert result.survivor == a.conversation_id
    assert [m.text for m in merged] == [
        "a1", "re: a1", "b1", "re: b1", "a2", "re: a2", "b2", "re: b2", "/link CODE",
    ]  # fmt: skip
    assert [m.seq for m in merged] == list(range(1, 10))
    by_seq = {m.seq: m for m in merged}
    for message in merged:
        if message.role is Role.ASSISTANT:
            assert message.reply_to_seq is not None
            assert by_seq[message.reply_to_seq].text == message.text.removeprefix("re: ")
    assert chunks == 0
    assert gone is None
    assert survivor is not None
    assert (survivor.last_seq, survivor.last_user_seq, survivor.answered_seq) == (9, 9, 9)
    assert moved_trigger is not None
    assert moved_trigger.conversation_id == a.conversation_id
    assert moved_trigger.seq == 9
    assert ref.conversation_id == a.conversation_id
    assert ref.user_id == a.user_id
    assert turn is None  # the /link message is the one being answered; nothing else owed


async def test_a_merge_keeps_both_profiles_with_their_evidence_and_leaves_nobody_behind(
    database_url: str,
) -> None:
    async with _storage(database_url) as (sessions, repos):
        profiles = Profiles(sessions)
        t0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        people = [
            await repos.identities.resolve_identity(
                channel, external, display_name="Sam", timezone="UTC", now=t0
            )
            for channel, external in (("telegram", "1"), ("whatsapp", "2"))
        ]
        said: dict[str, Any] = {}
        # Alternating, so the merge renumbers both: a0 b0 a1 b1 a2 b2.
        for minute in range(6):
            ref = people[minute % 2]
            text = f"{'ab'[minute % 2]}{minute // 2}"
            said[text], _ = await repos.messages.add_message(
                ref.conversation_id,
                NewMessage(Role.USER, "telegram", text, identity_id=ref.identity_id),
                now=t0 + timedelta(minutes=minute),
            )

        def fact(line: str, *texts: str) -> Fact:
            seqs = tuple(said[t].seq for t in texts)
            return Fact(line, (Evidence(77, seqs, t0),))

        a, b = (ref.user_id for ref in people)
        await profiles.append(
            a, [fact("has a cat", "a2"), fact("likes tea", "a0")], t0, chunk_id=None
        )
        await profiles.append(
            b, [fact("lives in Oslo", "b1"), fact("Likes tea", "b2")], t0, chunk_id=None
        )
        await profiles.append(b, [fact("was 29", "b0")], t0, chunk_id=None)
        await profiles.forget(b, "was 29", t0)  # a retired fact of the absorbed person
        merged_now = t0 + timedelta(hours=1)
        assert await repos.links.merge_users(a, b, now=merged_now)

        merged = await profiles.get(a)
        retired = await profiles.retired(a)
        changes = await profiles.changes(a, before_id=2**62, limit=10)
        by_seq = {
            m.seq: m.text
            for m in await repos.messages.messages_after(people[0].conversation_id, 0, 10)
        }
        async with sessions() as session:
            users = list(await session.scalars(select(User.id)))
            left = list(await session.scalars(select(Profile.user_id)))

    assert users == [a]
    assert left == [a]
    assert merged.lines == ("has a cat", "likes tea", "lives in Oslo")
    cited = [[by_seq[seq] for e in sources for seq in e.seqs] for sources in merged.sources]
    # Each fact still cites the very messages it came from, under their new seqs; a line
    # both had keeps the evidence of both.
    assert cited == [["a2"], ["a0", "b2"], ["b1"]]
    assert all(e.chunk_id == 0 for sources in merged.sources for e in sources)  # re-cut
    assert [(f.text, [by_seq[s] for e in f.sources for s in e.seqs]) for f in retired] == [
        ("was 29", ["b0"])
    ]
    # The change log says who joined them, and keeps the absorbed profile's history.
    assert [(c.by, c.added, c.removed) for c in changes] == [
        ("operator: merge", ["lives in Oslo"], []),
        ("person: /forget", [], ["was 29"]),
        ("model: facts", ["was 29"], []),
        ("model: facts", ["lives in Oslo", "Likes tea"], []),
        ("model: facts", ["has a cat", "likes tea"], []),
    ]
