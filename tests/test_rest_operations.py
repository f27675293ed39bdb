"""Operator work over REST: pairing (and the people it concerns), merging and unlinking
people, failed deliveries, memory jobs and the work still waiting, each checked against
what the gateway then does."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select, update

from gateway.services import Services
from memory.storage.engine import session_factory
from memory.storage.messages import NewMessage
from memory.storage.models import Chunk, ChunkStatus, Delivery, Message, Role
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import TgFail
from tests.support.clock import ManualClock
from tests.support.harness import ADMIN_TOKEN, make_settings, next_frame, running_gateway
from tests.support.platforms import platform_gateway
from tests.support.polling import eventually

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
STRANGER, OTHER, CHAT = 5150, 5151, 5152


async def test_pairing_requests_are_approved_and_rejected(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm, telegram_policy="pairing") as p:
        for person in (STRANGER, OTHER):
            await p.telegram(tg.text_update(person, "hello?"))
        await p.tg.wait_until(lambda f: bool(f.texts(STRANGER)) and bool(f.texts(OTHER)))
        waiting = (await p.gw.http.get("/api/v1/pairing", headers=ADMIN)).json()["items"]
        code = {int(w["external_id"]): w["code"] for w in waiting}
        approved = await p.gw.http.post(f"/api/v1/pairing/{code[STRANGER]}/approve", headers=ADMIN)
        rejected = await p.gw.http.post(f"/api/v1/pairing/{code[OTHER]}/reject", headers=ADMIN)
        unknown = await p.gw.http.post("/api/v1/pairing/NOPE2345/approve", headers=ADMIN)
        left = (await p.gw.http.get("/api/v1/pairing", headers=ADMIN)).json()["items"]
        await p.telegram(tg.text_update(STRANGER, "now may I?"))
        await p.tg.wait_until(lambda f: len(f.texts(STRANGER)) == 2)

    assert approved.status_code == 200, approved.text
    assert approved.json()["approved_at"] is not None
    assert rejected.status_code == 200
    assert unknown.status_code == 404
    assert left == []
    assert len(llm.requests) == 1
    assert "now may I?" in str(llm.requests[0]["messages"][-1])


async def test_pairing_requests_are_listed_a_page_at_a_time_oldest_first(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        pairings, now = gw.services.repos.pairings, gw.services.clock.now()
        asked = [
            # Two asked at the very same moment: the page boundary falls between them.
            (now - timedelta(minutes=5), "p1"),
            (now - timedelta(minutes=3), "p2"),
            (now - timedelta(minutes=3), "p3"),
            (now - timedelta(minutes=1), "p4"),
            (now - timedelta(days=2), "expired"),
        ]
        for at, who in asked:
            await pairings.request_pairing(
                "telegram", who, who, now=at, ttl=timedelta(hours=1), cap=10
            )
        url = "/api/v1/pairing"
        whole = await gw.http.get(url, headers=ADMIN)
        first = await gw.http.get(url, params={"limit": 2}, headers=ADMIN)
        second = await gw.http.get(
            url, params={"limit": 2, "cursor": first.json()["next_cursor"]}, headers=ADMIN
        )
        for _ in range(2):
            await gw.visitor()
        sessions = await gw.http.get("/api/v1/sessions", params={"limit": 1}, headers=ADMIN)
        refused = [
            await gw.http.get(url, params=params, headers=ADMIN)
            for params in (
                {"cursor": "not-a-cursor"},
                {"cursor": first.json()["next_cursor"] + "x"},
                {"cursor": sessions.json()["next_cursor"]},  # another list's
                {"limit": 0},
                {"limit": 501},
            )
        ]

    assert whole.status_code == 200, whole.text
    assert set(whole.json()) == {"items", "next_cursor"}
    assert whole.json()["next_cursor"] is None
    everyone = [item["external_id"] for item in whole.json()["items"]]
    assert everyone[0] == "p1"
    assert everyone[-1] == "p4"
    assert sorted(everyone) == ["p1", "p2", "p3", "p4"]
    assert isinstance(first.json()["next_cursor"], str)
    assert second.json()["next_cursor"] is None
    paged = first.json()["items"] + second.json()["items"]
    assert [item["external_id"] for item in paged] == everyone
    assert [r.status_code for r in refused] == [422] * 5
    assert [r.json()["error"]["code"] for r in refused[:3]] == ["invalid_cursor"] * 3


async def test_two_people_are_merged_and_unlinked_again(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        first, first_session = await gw.visitor()
        second, second_session = await gw.visitor()
        await gw.send(first, "one")
        await gw.send(second, "two")
        await gw.send(first, "three")

        async def seen(token: str, mark: int | None = None) -> int:
            """How far `token`'s person has read (after marking `mark` read)."""
            async with gw.socket(token, ready=False) as ws:
                ready = await next_frame(ws, "ready")
                if mark is not None:
                    await ws.send(json.dumps({"type": "seen", "seq": mark}))
                    # Frames are handled in order: this one's error says the mark is stored
                    # (closing at once could let the next socket read before it was).
                    await ws.send(json.dumps({"type": "seen", "seq": -1}))
                    await next_frame(ws, "error")
            if mark is None:
                return int(ready["seen_seq"])
            return await seen(token)

        read_before = [await seen(first, 4), await seen(second, 2)]
        survivor = (await gw.http.get(f"/api/v1/sessions/{first_session}", headers=ADMIN)).json()
        absorbed = (await gw.http.get(f"/api/v1/sessions/{second_session}", headers=ADMIN)).json()
        url = f"/api/v1/users/{survivor['user_id']}/merge"
        merged = await gw.http.post(url, json={"other_user_id": absorbed["user_id"]}, headers=ADMIN)
        self_merge = await gw.http.post(
            url, json={"other_user_id": survivor["user_id"]}, headers=ADMIN
        )
        history = [m["text"] for m in await gw.history(first) if m["role"] == "user"]
        gone = await gw.http.get(f"/api/v1/sessions/{second_session}", headers=ADMIN)
        person_gone = await gw.http.get(f"/api/v1/users/{absorbed['user_id']}", headers=ADMIN)
        people = (await gw.http.get("/api/v1/users", headers=ADMIN)).json()["items"]
        read_merged = [await seen(first), await seen(second)]
        identity = absorbed["identities"][0]["id"]
        unlinked = await gw.http.delete(f"/api/v1/identities/{identity}", headers=ADMIN)
        read_unlinked = await seen(second)
        only = merged.json()["identities"][0]["id"]
        last = await gw.http.delete(f"/api/v1/identities/{only}", headers=ADMIN)

    assert merged.status_code == 200, merged.text
    assert len(merged.json()["identities"]) == 2
    assert self_merge.status_code == 422
    assert history == ["one", "two", "three"]
    assert gone.status_code == 404
    assert person_gone.status_code == 404  # nobody is left behind, empty
    assert [p["id"] for p in people] == [survivor["user_id"]]
    # Each had read their whole history; merged, each has read up to its last message:
    # the first's four are now 1, 2, 5 and 6, the second's two (3 and 4 before them).
    assert read_before == [4, 2]
    assert read_merged == [6, 4]
    assert read_unlinked == 0  # a new conversation, numbered from 1 again
    assert unlinked.status_code == 200
    assert unlinked.json()["user_id"] != survivor["user_id"]
    assert last.status_code == 409


async def test_a_failed_delivery_is_listed_with_its_reason_and_sent_again(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm, delivery_max_attempts=2) as p:
        p.tg.fail("sendMessage", *[TgFail(500, "Internal Server Error: try later")] * 2)
        await p.telegram(tg.text_update(CHAT, "hello?"))
        failed = await eventually(
            lambda: p.gw.http.get("/api/v1/deliveries", headers=ADMIN),
            until=lambda r: len(r.json()["items"]) == 1,
        )
        reply = failed.json()["items"][0]
        retried = await p.gw.http.post(
            f"/api/v1/deliveries/{reply['id']}/retry", headers=ADMIN | {"Idempotency-Key": "d1"}
        )
        await p.tg.wait_until(lambda f: len(f.texts(CHAT)) == 1)
        replay = await p.gw.http.post(
            f"/api/v1/deliveries/{reply['id']}/retry", headers=ADMIN | {"Idempotency-Key": "d1"}
        )
        again = await p.gw.http.post(f"/api/v1/deliveries/{reply['id']}/retry", headers=ADMIN)
        after = await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")

    assert (
        reply["delivery_error"]
        == "Telegram did not take the message: Internal Server Error: try later"
    )
    assert retried.status_code == 200, retried.text
    assert replay.json() == retried.json()
    assert again.status_code == 404  # not failed any more
    assert after[-1]["delivery_error"] is None
    assert len(p.tg.texts(CHAT)) == 1


async def test_a_failed_summary_is_listed_and_retried(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm)
    async with running_gateway(settings) as gw:
        _, session = await gw.visitor()
        chunk_id = await _failed_chunk(gw.services, session)
        listed = (
            await gw.http.get("/api/v1/jobs", params={"state": "failed"}, headers=ADMIN)
        ).json()
        retried = await gw.http.post(f"/api/v1/jobs/summarize:{chunk_id}/retry", headers=ADMIN)
        await gw.services.queue.idle()  # type: ignore[attr-defined]
        chunk = (await gw.http.get(f"/api/v1/chunks/{chunk_id}", headers=ADMIN)).json()
        pending = (
            await gw.http.get("/api/v1/jobs", params={"state": "failed"}, headers=ADMIN)
        ).json()
        missing = await gw.http.post("/api/v1/jobs/summarize:999999/retry", headers=ADMIN)

    assert [job["id"] for job in listed["items"]] == [f"summarize:{chunk_id}"]
    assert listed["items"][0]["last_error"] == "the model was down"
    assert retried.status_code == 202, retried.text
    assert chunk["state"] == "ready"
    assert pending["items"] == []
    assert missing.status_code == 404


async def _failed_chunk(services: Services, session: str) -> int:
    """A level-0 chunk over a conversation's first exchange whose summary failed."""
    conversation_id = uuid.UUID(session)
    now = services.clock.now()
    for text in ("first", "second"):
        await services.repos.messages.add_message(
            conversation_id, NewMessage(Role.USER, "webchat", text), now=now
        )
    sessions = session_factory(services.engine)
    async with sessions() as db:
        chunk = Chunk(
            conversation_id=conversation_id,
            level=0,
            seq_start=1,
            seq_end=2,
            time_start=now,
            time_end=now,
            transcript="[…] first\n\n[…] second\n",
            status=ChunkStatus.FAILED,
            attempts=5,
            last_error="the model was down",
            next_attempt_at=now + timedelta(days=1),
        )
        db.add(chunk)
        await db.flush()
        await db.execute(
            update(Message)
            .where(Message.conversation_id == conversation_id)
            .values(chunk_id=chunk.id)
        )
        await db.commit()
        return chunk.id


async def test_people_asking_to_be_let_in_are_found_by_the_pairing_filter(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    clock = ManualClock(datetime.now(UTC))
    async with platform_gateway(database_url, tmp_path, llm, clock=clock) as p:
        for person in (STRANGER, OTHER):
            await p.telegram(tg.text_update(person, "hello"))
        await p.tg.wait_until(lambda f: bool(f.texts(STRANGER)) and bool(f.texts(OTHER)))
        pairings = p.gw.services.repos.pairings

        async def asking() -> tuple[list[str], list[str]]:
            """Whom the pairing filter lists, and whom the list of everyone flags."""
            found = await p.gw.http.get("/api/v1/users", params={"needs": "pairing"}, headers=ADMIN)
            everyone = await p.gw.http.get("/api/v1/users", headers=ADMIN)
            assert found.status_code == everyone.status_code == 200, found.text
            return (
                [person["display_name"] for person in found.json()["items"]],
                [
                    person["display_name"]
                    for person in everyone.json()["items"]
                    if person["state"]["pairing_pending"]
                ],
            )

        # The stranger's Telegram asks again (its channel turned `pairing`), and someone
        # nobody knows asks too: only a known person is a person to list.
        await pairings.request_pairing(
            "telegram", str(STRANGER), "Test", now=clock.now(), ttl=timedelta(hours=1), cap=10
        )
        await pairings.request_pairing(
            "telegram", "999", "Nobody", now=clock.now(), ttl=timedelta(hours=1), cap=10
        )
        while_waiting = await asking()
        clock.advance(timedelta(hours=2))
        once_expired = await asking()
        again = await pairings.request_pairing(
            "telegram", str(STRANGER), "Test", now=clock.now(), ttl=timedelta(hours=1), cap=10
        )
        assert again is not None
        approved = await p.gw.http.post(f"/api/v1/pairing/{again.code}/approve", headers=ADMIN)
        once_approved = await asking()

    assert while_waiting == (["Test User"], ["Test User"])
    assert once_expired == ([], [])
    assert approved.status_code == 200, approved.text
    assert once_approved == ([], [])


async def test_stats_say_how_much_work_waits_and_since_when(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # No sweep meanwhile: what waits stays waiting.
    settings = make_settings(database_url, tmp_path, llm, sweep_interval_seconds=3600)
    async with running_gateway(settings) as gw:
        empty = (await gw.http.get("/api/v1/stats", headers=ADMIN)).json()["queues"]
        token, session = await gw.visitor()
        for text in ("one", "two"):
            await gw.send(token, text)
        now = gw.services.clock.now()
        # A failing chunk is retried: it waits for its summary too, the longest here.
        cut = {
            "failing": now - timedelta(hours=4),
            "summaries": now - timedelta(hours=3),
            "extractions": now - timedelta(hours=2),
        }
        written = now - timedelta(minutes=5)
        sessions = session_factory(gw.services.engine)
        async with sessions() as db:
            for seq, (status, at) in enumerate(
                [
                    (ChunkStatus.FAILED, cut["failing"]),
                    (ChunkStatus.PENDING, cut["summaries"]),
                    (ChunkStatus.READY, cut["extractions"]),
                    (ChunkStatus.PENDING, now),
                ]
            ):
                db.add(_chunk(uuid.UUID(session), seq, status, at))
            await db.commit()
        await gw.services.repos.messages.add_message(
            uuid.UUID(session),
            NewMessage(Role.ASSISTANT, "telegram", "waiting to go", delivery=Delivery.PENDING),
            now=written,
        )
        stats = (await gw.http.get("/api/v1/stats", headers=ADMIN)).json()
        async with sessions() as db:
            prompts = list(
                await db.scalars(
                    select(Message.prompt_tokens)
                    .where(Message.prompt_tokens.is_not(None))
                    .order_by(Message.seq)
                )
            )

    nothing = {"waiting": 0, "oldest_at": None}
    assert empty == {"summaries": nothing, "extractions": nothing, "deliveries": nothing}
    queues = {
        name: (queue["waiting"], datetime.fromisoformat(queue["oldest_at"]))
        for name, queue in stats["queues"].items()
    }
    assert queues == {
        "summaries": (3, cut["failing"]),
        "extractions": (1, cut["extractions"]),
        "deliveries": (1, written),
    }
    # The archive's chunks by state; how many wait, and since when, is said once (queues).
    assert stats["archive"] == {"chunks": {"failed": 1, "pending": 2, "ready": 1}}
    turns = stats["prompt_tokens_per_turn"]
    assert [t["prompt_tokens"] for t in turns] == prompts
    assert len(prompts) == 2
    assert turns[0]["at"] < turns[1]["at"]


def _chunk(conversation_id: uuid.UUID, seq: int, status: ChunkStatus, at: datetime) -> Chunk:
    return Chunk(
        conversation_id=conversation_id,
        level=0,
        seq_start=seq,
        seq_end=seq,
        time_start=at,
        time_end=at,
        transcript="[…] something\n",
        status=status,
        created_at=at,
    )
