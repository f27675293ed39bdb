"""Photos, voice notes and files sent on Telegram (DESIGN §11): the webhook is
acknowledged before the file is fetched; the file is fetched by the connector
(`getFile`, then the download), read from its bytes, kept in the database and shown to
a model that sees; the turn waits for it; a platform that does not give it leaves a
clear line and a normal reply, and the bot's token is never in a log line."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog

from memory.storage.attachments import PlatformFile
from memory.storage.messages import NewMessage, StoredMessage
from memory.storage.models import AttachmentKind, AttachmentState, Role
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import Behaviour, CallTools, Fail, FakeLLM
from tests.support import media
from tests.support.platforms import ADMIN, platform_gateway
from tests.support.polling import eventually

VOICE = media.VOICE


def _user_contents(llm: FakeLLM, request: int = -1) -> list[object]:
    return [m["content"] for m in llm.requests[request]["messages"] if m["role"] == "user"]


async def test_a_photo_is_acknowledged_first_then_fetched_and_shown_to_the_model(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with tg.fake_telegram() as fake:
        fake.files["AgAD-large"] = media.photo(1280, 960)
        fake.files_gate = asyncio.Event()  # Telegram slow to give the file
        async with platform_gateway(database_url, tmp_path, llm, tg=fake) as p:
            acknowledged = await p.telegram(tg.photo_update(3333, caption="our new sofa"))
            # Acknowledged while the file is still being asked for: no model yet.
            await fake.wait_until(lambda f: bool(f.calls_of("getFile")))
            asked_before = len(llm.requests)
            fake.files_gate.set()
            await fake.wait_until(lambda f: len(f.texts(3333)) == 1)
            [message] = [m for m in await p.all_messages() if m["role"] == "user"]

    assert acknowledged.status_code == 200
    assert asked_before == 0
    # The largest size of the photo, the one asked for.
    assert [c.params["file_id"] for c in fake.calls_of("getFile")] == ["AgAD-large"]
    assert fake.downloads == ["files/AgAD-large"]
    [content] = _user_contents(llm, 0)  # the turn's (a description is asked after)
    assert isinstance(content, list)
    words, image = content
    assert words["text"].endswith("our new sofa\n[image 1280×960, not described]")
    shown = media.shown_image(image)
    assert shown.size == (1280, 960)
    assert len(shown.getexif()) == 0  # no place, no camera
    [file] = message["attachments"]
    assert (file["kind"], file["state"], file["mime"]) == ("image", "ready", "image/jpeg")
    assert message["text"] == "our new sofa"
    assert message["source"] is None


async def test_a_voice_note_is_transcribed_into_the_persons_words(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.transcripts.append("remind me to water   the ferns on Sunday")
    async with tg.fake_telegram() as fake:
        fake.files["AwAD-voice"] = VOICE
        async with platform_gateway(database_url, tmp_path, llm, tg=fake) as p:
            await p.telegram(tg.voice_update(3333))
            await fake.wait_until(lambda f: len(f.texts(3333)) == 1)
            [message] = [m for m in await p.all_messages() if m["role"] == "user"]
            [session] = await p.sessions()
            found = await p.gw.http.get(
                f"/api/v1/sessions/{session['id']}/search", params={"q": "ferns"}, headers=ADMIN
            )
            # What the model's archive_search reads: the same index.
            best = await p.gw.services.repos.search.best(
                uuid.UUID(session["id"]), "water ferns", limit=3
            )

    [hit] = found.json()["items"]
    assert (hit["kind"], hit["seq"]) == ("message", message["seq"])
    assert "«ferns»" in hit["snippet"]
    assert [h.seq for h in best.messages] == [message["seq"]]
    [content] = _user_contents(llm)
    assert content == (
        "[source: voice note, 0:04, transcribed]\nremind me to water the ferns on Sunday"
    )
    [asked] = llm.transcriptions
    assert (asked["model"], asked["mime"], asked["data"]) == ("whisper-1", "audio/ogg", VOICE)
    assert asked["authorization"] == "Bearer sk-test-key-that-must-not-leak"
    [file] = message["attachments"]
    assert (file["kind"], file["state"], file["mime"]) == ("audio", "ready", "audio/ogg")
    assert file["bytes"] == len(VOICE)
    assert file["text"] == "remind me to water the ferns on Sunday"


async def test_a_transcriber_that_is_down_leaves_a_clear_line_and_a_normal_reply(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.transcripts.extend([Fail(503, message="busy")] * 3)  # the try and its two retries
    async with tg.fake_telegram() as fake:
        fake.files["AwAD-voice"] = VOICE
        async with platform_gateway(
            database_url, tmp_path, llm, tg=fake, llm_retry_base_seconds=0.01
        ) as p:
            await p.telegram(tg.voice_update(3333))
            await fake.wait_until(lambda f: len(f.texts(3333)) == 1)
            [message] = [m for m in await p.all_messages() if m["role"] == "user"]

    assert len(llm.transcriptions) == 3
    [content] = _user_contents(llm)
    assert isinstance(content, str)
    assert content.endswith("[voice note, 0:04, not transcribed]")
    assert fake.texts(3333) == ["reply 1"]
    assert message["attachments"][0]["state"] == "ready"  # kept all the same


async def test_a_file_telegram_does_not_give_leaves_a_clear_line_and_a_normal_reply(
    database_url: str, tmp_path: Path, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    disguised = tg.document_update(3333, "BQAD-page", "holiday.jpg", "image/jpeg", message_id=501)
    async with tg.fake_telegram() as fake:
        # The first download fails as a busy server would, and is asked again; the
        # "photo" is a web page; the voice note's file Telegram no longer has.
        fake.download_failures.append(502)
        fake.files["BQAD-page"] = b"<html><script>alert(1)</script></html>"
        async with platform_gateway(database_url, tmp_path, llm, tg=fake) as p:
            with structlog.testing.capture_logs() as logs:
                await p.telegram(disguised)
                await fake.wait_until(lambda f: len(f.texts(3333)) == 1)
                await p.telegram(tg.voice_update(3333, message_id=502))
                await fake.wait_until(lambda f: len(f.texts(3333)) == 2)
            messages = [m for m in await p.all_messages() if m["role"] == "user"]

    page, voice = (message["attachments"][0] for message in messages)
    # Read for what its bytes are, not its name: text, kept as such (served as plain
    # text, as a download), never shown to a model as an image.
    assert (page["kind"], page["state"], page["mime"]) == ("document", "ready", "text/plain")
    assert fake.downloads == ["files/BQAD-page", "files/BQAD-page"]
    # Its words go to the model as the file's, behind their source line.
    assert _user_contents(llm, 0)[-1] == (
        f"[source: file holiday.jpg (attachment {page['id']}), 1 page]\n"
        "<html><script>alert(1)</script></html>"
    )
    assert voice["state"] == "failed"
    assert str(_user_contents(llm, 1)[-1]).endswith(
        "[voice note, 0:04, could not be fetched or read]"
    )
    assert all(reply != "" for reply in fake.texts(3333))
    assert tg.TOKEN not in repr(logs)
    assert tg.TOKEN not in caplog.text


async def test_a_pdf_shows_its_start_and_the_model_reads_on_with_attachment_read(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    first = "Tenancy agreement. " + "The tenant keeps the flat tidy. " * 60
    document = tg.document_update(
        3333,
        "BQAD-lease",
        "lease.pdf",
        "application/pdf",
        message_id=701,
        caption="what does page 2 say?",
    )

    def reading(body: dict[str, Any], number: int) -> Behaviour | None:
        told = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        named = re.search(r"\(attachment (\d+)\)", told) if isinstance(told, str) else None
        if named and not any(m["role"] == "tool" for m in body["messages"]):
            read = {"attachment_id": int(named.group(1)), "page": 2}
            return CallTools([("attachment_read", read)])
        return None

    llm.responder = reading
    async with tg.fake_telegram() as fake:
        fake.files["BQAD-lease"] = media.pdf([first, "Rent is 950 euros a month."])
        async with platform_gateway(database_url, tmp_path, llm, tg=fake) as p:
            await p.telegram(document)
            await fake.wait_until(lambda f: len(f.texts(3333)) == 1)
            [message] = [m for m in await p.all_messages() if m["role"] == "user"]

    [file] = message["attachments"]
    told = _user_contents(llm, 0)[-1]
    assert isinstance(told, str)
    # The caption, then the document's start behind its source line, and how to read on.
    assert told.split("\n", 1)[1].startswith(  # after the time it was sent
        f"what does page 2 say?\n[source: file lease.pdf (attachment {file['id']}), 2 pages]\n"
        "Tenancy agreement."
    )
    assert told.endswith(
        f"[… more: attachment_read with attachment_id {file['id']} and a page number]"
    )
    assert "950 euros" not in told
    [result] = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert result == (
        f"[source: file lease.pdf (attachment {file['id']}), page 2 of 2]\n"
        "Rent is 950 euros a month."
    )
    assert (file["kind"], file["mime"], file["state"]) == ("document", "application/pdf", "ready")


async def test_an_empty_photo_and_a_bomb_each_get_a_clear_state_and_nothing_else_is_lost(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    bomb = tg.photo_update(3333, caption="a big one", message_id=801)
    bomb["message"]["photo"][-1]["file_id"] = "AgAD-bomb"
    empty = tg.photo_update(3333, caption="and an empty one", message_id=802)
    empty["message"]["photo"][-1]["file_id"] = "AgAD-empty"
    async with tg.fake_telegram() as fake:
        fake.files |= {"AgAD-bomb": media.bomb(), "AgAD-empty": b""}
        async with platform_gateway(database_url, tmp_path, llm, tg=fake) as p:
            await p.telegram(bomb)
            await fake.wait_until(lambda f: len(f.texts(3333)) == 1)
            await p.telegram(empty)
            await fake.wait_until(lambda f: len(f.texts(3333)) == 2)
            messages = [m for m in await p.all_messages() if m["role"] == "user"]

    assert [m["attachments"][0]["state"] for m in messages] == ["too_large", "failed"]
    assert [m["text"] for m in messages] == ["a big one", "and an empty one"]
    told = [str(_user_contents(llm, n)[-1]) for n in (0, 1)]
    assert told[0].endswith("a big one\n[image, too large to read]")
    assert told[1].endswith("and an empty one\n[image, could not be fetched or read]")


async def test_a_file_a_dead_process_left_fetching_is_fetched_by_the_sweep(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with tg.fake_telegram() as fake:
        fake.files["AgAD-large"] = media.photo()
        async with platform_gateway(database_url, tmp_path, llm, tg=fake) as p:
            services = p.gw.services
            identity = await services.core.identity("telegram", "3333")

            async def stored(text: str, number: int, file_id: str, now: datetime) -> StoredMessage:
                message, _ = await services.repos.messages.add_message(
                    identity.conversation_id,
                    NewMessage(
                        role=Role.USER,
                        channel="telegram",
                        text=text,
                        identity_id=identity.identity_id,
                        platform_message_id=f"3333:{number}",
                        platform_files=(PlatformFile(AttachmentKind.IMAGE, file_id),),
                    ),
                    now=now,
                )
                return message

            # Stored by a process that died before it fetched the file.
            long_ago = services.clock.now() - timedelta(minutes=10)
            message = await stored("from before the crash", 901, "AgAD-large", long_ago)
            fresh = await stored(
                "still being fetched by a live process", 902, "AgAD-other", services.clock.now()
            )
            # (The sweep that ran at start may have found it first: either fetches it.)
            await services.fetcher.sweep()
            files = await eventually(
                lambda: services.repos.attachments.of_messages([message.id, fresh.id]),
                until=lambda found: found[message.id][0].state is AttachmentState.READY,
            )

    # The fresh one is left to the process fetching it.
    assert [f.state for f in files[fresh.id]] == [AttachmentState.FETCHING]
    assert fake.downloads == ["files/AgAD-large"]
