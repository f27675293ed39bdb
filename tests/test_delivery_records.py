"""What a sent part leaves in the database, on SQLite (one transaction) and on Postgres
(one statement): the part, the reply's count, and the reply sent with its last part."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.channels.delivery import DeliveryLoop, RetryPolicy
from gateway.channels.port import Connector
from gateway.clock import SystemClock
from gateway.envelopes import Outbound
from memory.storage.deliveries import DeliveryMoved, DeliveryState, NotPending
from memory.storage.messages import NewMessage, StoredMessage
from memory.storage.models import Delivery, Message, Role, SentPart, StreamPreview
from memory.storage.previews import PreviewPlace
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens
from tests.fakes.recording_platform import RecordingPlatform
from tests.support.polling import eventually

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def repos(sessions: async_sessionmaker[AsyncSession]) -> Repositories:
    return Repositories.open(sessions, count_tokens=message_tokens, now=lambda: NOW)


async def _pending_reply(repos: Repositories, person: str = "9") -> StoredMessage:
    ref = await repos.identities.resolve_identity(
        "telegram", person, display_name="Di", timezone="UTC", now=NOW
    )
    asked, _ = await repos.messages.add_message(
        ref.conversation_id, NewMessage(Role.USER, "telegram", "tell me a long story"), now=NOW
    )
    reply, _ = await repos.messages.add_message(
        ref.conversation_id,
        NewMessage(
            Role.ASSISTANT,
            "telegram",
            "once upon a time …",
            reply_to_seq=asked.seq,
            delivery=Delivery.PENDING,
        ),
        now=NOW,
    )
    return reply


async def _state(repos: Repositories, reply: StoredMessage) -> DeliveryState:
    state = await repos.deliveries.state(reply.id)
    assert state is not None
    return state


async def _count(sessions: async_sessionmaker[AsyncSession], table: Any) -> int:
    async with sessions() as session:
        return await session.scalar(select(func.count()).select_from(table)) or 0


async def test_a_reply_is_counted_part_by_part_and_sent_with_its_last_once(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    reply = await _pending_reply(repos)
    deliveries = repos.deliveries

    await deliveries.sending(reply.id, 0)
    first = await deliveries.part_sent(reply.id, 0, "telegram", "9:100", now=NOW)
    after_first = await _state(repos, reply)
    await deliveries.sending(reply.id, 1)
    last = await deliveries.part_sent(reply.id, 1, "telegram", "9:101", now=NOW, last=True)
    after_last = await _state(repos, reply)
    # The last part recorded again, by a sender that stalled while this one went on:
    # recorded once, counted once.
    with pytest.raises(NotPending):
        await deliveries.part_sent(reply.id, 1, "telegram", "9:101", now=NOW, last=True)

    assert first is None
    assert (after_first.delivery, after_first.parts_sent, after_first.uncertain_part) == (
        Delivery.PENDING,
        1,
        None,
    )
    assert last == DeliveryMoved(reply.id, reply.conversation_id, reply.seq)
    assert (after_last.delivery, after_last.parts_sent, after_last.attempts) == (
        Delivery.SENT,
        2,
        1,
    )
    assert (await _state(repos, reply)).attempts == 1
    assert await _count(sessions, SentPart) == 2


async def test_a_part_that_went_out_after_its_reply_failed_is_recorded_not_counted(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    reply = await _pending_reply(repos)
    await repos.deliveries.sending(reply.id, 0)
    await repos.deliveries.attempt_failed(reply.id, "blocked", final=True)

    with pytest.raises(NotPending):
        await repos.deliveries.part_sent(reply.id, 0, "telegram", "9:100", now=NOW, last=True)

    state = await _state(repos, reply)
    assert (state.delivery, state.parts_sent, state.attempts) == (Delivery.FAILED, 0, 1)
    assert await _count(sessions, SentPart) == 1  # its receipts still find it


async def test_a_stalled_sender_s_late_record_takes_nothing_back(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # A sender marked part 0 and stalled mid-send; its lane went to another sender,
    # which settled part 0 as in doubt (skipped), sent part 1 and marked part 2.
    reply = await _pending_reply(repos)
    deliveries = repos.deliveries
    await deliveries.sending(reply.id, 0)
    await deliveries.uncertain(reply.id, 0, skip=True)
    await deliveries.sending(reply.id, 1)
    await deliveries.part_sent(reply.id, 1, "telegram", "9:101", now=NOW)
    await deliveries.sending(reply.id, 2)

    with pytest.raises(NotPending) as caught:
        await deliveries.part_sent(reply.id, 0, "telegram", "9:100", now=NOW)

    state = await _state(repos, reply)
    assert (caught.value.message_id, caught.value.part) == (reply.id, 0)
    # Part 2's mark stands (a crash now leaves it in doubt), and part 1 is not sent again.
    assert (state.delivery, state.parts_sent, state.uncertain_part) == (Delivery.PENDING, 2, 2)
    assert await _count(sessions, SentPart) == 2


async def test_a_part_edited_into_its_preview_ends_the_preview_and_one_without_an_id_is_counted(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    reply = await _pending_reply(repos)
    assert reply.reply_to_seq is not None
    place = PreviewPlace(reply.conversation_id, reply.reply_to_seq, "telegram", "9")
    await repos.previews.record(place, "9:99")

    await repos.deliveries.sending(reply.id, 0)
    await repos.deliveries.part_sent(reply.id, 0, "telegram", "9:99", now=NOW, preview="9:99")
    await repos.deliveries.sending(reply.id, 1)
    moved = await repos.deliveries.part_sent(reply.id, 1, "telegram", None, now=NOW, last=True)

    state = await _state(repos, reply)
    assert await _count(sessions, StreamPreview) == 0
    assert moved is not None
    assert (state.delivery, state.parts_sent) == (Delivery.SENT, 2)
    assert await _count(sessions, SentPart) == 1  # the part with no platform id has no row


async def test_a_part_is_marked_as_going_out_only_next_in_line_of_a_pending_reply(
    repos: Repositories,
) -> None:
    deliveries = repos.deliveries
    pending, sent, failed, erased, in_doubt = [
        await _pending_reply(repos, person) for person in "12345"
    ]
    await deliveries.sending(pending.id, 0)
    await deliveries.part_sent(pending.id, 0, "telegram", "9:100", now=NOW)
    await deliveries.sending(sent.id, 0)
    await deliveries.part_sent(sent.id, 0, "telegram", "9:200", now=NOW, last=True)
    await deliveries.attempt_failed(failed.id, "blocked", final=True)
    assert await repos.erasure.delete_conversation(erased.conversation_id, now=NOW) is not None
    await deliveries.sending(in_doubt.id, 0)  # and the process stopped

    refused = []
    for reply, part in [
        (pending, 0),  # sent already
        (pending, 2),  # part 1 is not
        (sent, 1),
        (failed, 0),
        (erased, 0),
        (in_doubt, 0),  # settled first (`DeliveryLoop._settle_uncertain`)
    ]:
        with pytest.raises(NotPending) as caught:
            await deliveries.sending(reply.id, part)
        refused.append((caught.value.message_id, caught.value.part))
    await deliveries.sending(pending.id, 1)

    assert refused == [
        (pending.id, 0),
        (pending.id, 2),
        (sent.id, 1),
        (failed.id, 0),
        (erased.id, 0),
        (in_doubt.id, 0),
    ]
    assert (await _state(repos, pending)).uncertain_part == 1
    assert (await _state(repos, in_doubt)).uncertain_part == 0  # as it was


async def test_a_fresh_reply_that_moved_on_before_its_lane_got_to_it_goes_out_no_more(
    repos: Repositories,
) -> None:
    # Stored just now, a reply goes to its lane `fresh`, its state not read: the mark
    # before its first part is what finds it sent, failed or erased meanwhile.
    deliveries = repos.deliveries
    pending, sent, failed, erased = [await _pending_reply(repos, person) for person in "1234"]
    await deliveries.sending(sent.id, 0)
    await deliveries.part_sent(sent.id, 0, "telegram", "2:100", now=NOW, last=True)
    await deliveries.attempt_failed(failed.id, "blocked", final=True)
    assert await repos.erasure.delete_conversation(erased.conversation_id, now=NOW) is not None
    platform = RecordingPlatform()
    loop = DeliveryLoop(deliveries=deliveries, clock=SystemClock(), retry=RetryPolicy(3, 0.01, 0.1))

    for reply, person in [(sent, "2"), (failed, "3"), (erased, "4"), (pending, "1")]:
        outbound = Outbound(reply.id, "telegram", person, reply.text)
        await loop.submit(outbound, cast(Connector, platform), fresh=True)
    await eventually(lambda: _idle(loop), until=bool)

    assert platform.sent == [("1", pending.text)]
    assert (await _state(repos, pending)).delivery is Delivery.SENT
    assert (await _state(repos, sent)).attempts == 1  # as it was
    assert (await _state(repos, failed)).delivery is Delivery.FAILED
    assert await deliveries.state(erased.id) is None


async def _idle(loop: DeliveryLoop) -> bool:
    return not loop.busy


async def test_a_stale_mark_of_another_part_does_not_hold_a_reply_back(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # Left by a replica whose lane was taken while it stalled: a mark of a part other
    # than the next is in doubt about nothing (`state` says so), and must not keep the
    # reply pending for ever.
    reply = await _pending_reply(repos)
    async with sessions() as session:
        await session.execute(
            update(Message).where(Message.id == reply.id).values(delivery_sending_part=3)
        )
        await session.commit()
    assert (await _state(repos, reply)).uncertain_part is None

    await repos.deliveries.sending(reply.id, 0)

    assert (await _state(repos, reply)).uncertain_part == 0


async def test_a_part_sent_as_its_reply_was_erased_is_neither_recorded_nor_counted(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    reply = await _pending_reply(repos)
    await repos.deliveries.sending(reply.id, 0)
    assert await repos.erasure.delete_conversation(reply.conversation_id, now=NOW) is not None

    with pytest.raises(NotPending):
        await repos.deliveries.part_sent(reply.id, 0, "telegram", "9:100", now=NOW, last=True)

    assert await _count(sessions, SentPart) == 0
