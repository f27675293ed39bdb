"""Files a web chat visitor sends (DESIGN §11), so far images: uploaded before the
message that carries them, kept in the database without their EXIF (location
included) and at most 1568 px on a side, refused with a clear reason when too large,
not an image, corrupt, empty or a decompression bomb; only their uploader's message
can take them; the model is told of each; operators read and download them; erasure
leaves none."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from typing import Any

import httpx
from PIL import Image
from sqlalchemy import func, select

from gateway.jobs.memory_jobs import DESCRIBE_SYSTEM
from gateway.jobs.queue import EmbeddedQueue
from gateway.media.images import LONGEST_SIDE
from gateway.services import UNSENT_UPLOADS_KEPT
from memory.storage.engine import session_factory
from memory.storage.models import Attachment
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support import media
from tests.support.harness import (
    ADMIN_TOKEN,
    Gateway,
    make_settings,
    next_frame,
    running_gateway,
)

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _upload(
    gw: Gateway, token: str, data: bytes, name: str = "photo.jpg", mime: str = "image/jpeg"
) -> httpx.Response:
    return await gw.http.post(
        "/webchat/uploads",
        files={"file": (name, data, mime)},
        headers={"Authorization": f"Bearer {token}"},
    )


async def _read(gw: Gateway, token: str, attachment_id: int) -> httpx.Response:
    return await gw.http.get(
        f"/webchat/attachments/{attachment_id}", headers={"Authorization": f"Bearer {token}"}
    )


async def _send(gw: Gateway, token: str, text: str, attachments: list[int]) -> httpx.Response:
    return await gw.http.post(
        "/webchat/messages",
        json={"text": text, "attachments": attachments},
        headers={"Authorization": f"Bearer {token}"},
    )


def _images_asked(llm: FakeLLM) -> list[tuple[int, tuple[int, int]]]:
    """In the last request: each image shown, as (its message's index, its size)."""
    return [
        (index, media.shown_image(part).size)
        for index, message in enumerate(llm.requests[-1]["messages"])
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


def _last_user_content(llm: FakeLLM) -> Any:
    return [m for m in llm.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]


async def test_a_photo_is_kept_without_its_location_and_the_model_is_told_of_it(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    photo = media.photo(orientation=6)  # held upright: the pixels are on their side
    assert media.kept(photo).getexif().get_ifd(media.GPS)  # the source does say where it was taken
    settings = make_settings(database_url, tmp_path, llm)
    async with running_gateway(settings) as gw:
        token, session = await gw.visitor()
        uploaded = await _upload(gw, token, photo, name="IMG_0001.jpg")
        body = uploaded.json()
        sent = await _send(gw, token, "what is this?", [body["attachment_id"]])
        asked = _last_user_content(llm)
        bare = await _upload(gw, token, media.photo())
        captionless = await _send(gw, token, "", [bare.json()["attachment_id"]])
        bare_asked = _last_user_content(llm)
        url = f"/api/v1/sessions/{session}/messages"
        messages = (await gw.http.get(url, headers=ADMIN)).json()["items"]
        download = await gw.http.get(f"/api/v1/attachments/{body['attachment_id']}", headers=ADMIN)
        unknown = await gw.http.get("/api/v1/attachments/999999", headers=ADMIN)
        anonymous = await gw.http.get(f"/api/v1/attachments/{body['attachment_id']}")

    assert uploaded.status_code == 201, uploaded.text
    # Turned upright as it was held: 80 wide, 120 high.
    assert body | {"attachment_id": 0} == {
        "attachment_id": 0,
        "kind": "image",
        "mime": "image/jpeg",
        "bytes": body["bytes"],
        "width": 80,
        "height": 120,
    }
    assert sent.status_code == 200, sent.text
    assert sent.json()["reply"]["role"] == "assistant"
    # The model sees (an OpenAI-compatible one does unless told otherwise): the words
    # about the image, then the image itself, as it was kept.
    text, image = asked
    assert text["text"].endswith("what is this?\n[image 80×120, not described]")
    seen = media.shown_image(image)
    assert seen.size == (80, 120)
    assert len(seen.getexif()) == 0
    assert captionless.status_code == 200, captionless.text
    bare_text, bare_image = bare_asked
    assert bare_text == {"type": "text", "text": "[image 120×80, not described]"}
    assert media.shown_image(bare_image).size == (120, 80)
    with_file = [m for m in messages if m["attachments"]]
    assert [m["text"] for m in with_file] == ["what is this?", ""]
    [shown] = with_file[0]["attachments"]
    assert (shown["id"], shown["kind"], shown["state"]) == (body["attachment_id"], "image", "ready")
    assert download.status_code == 200
    assert download.headers["content-type"] == "image/jpeg"
    assert download.headers["content-disposition"].startswith('attachment; filename="IMG_0001.jpg"')
    kept = media.kept(download.content)
    assert kept.size == (80, 120)
    assert len(kept.getexif()) == 0  # no EXIF at all: no media.GPS, no camera
    assert b"PhoneMaker" not in download.content
    assert unknown.status_code == 404
    assert anonymous.status_code == 401


async def test_a_model_that_sees_is_shown_the_newest_images_and_one_that_does_not_is_told(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    sizes = [(60, 40), (70, 40), (80, 40)]
    settings = make_settings(database_url, tmp_path, llm, media_images_in_prompt=2)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        for number, (width, height) in enumerate(sizes):
            upload = await _upload(gw, token, media.photo(width, height))
            await _send(gw, token, f"photo {number}", [upload.json()["attachment_id"]])
        shown = _images_asked(llm)
        words = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    blind = make_settings(database_url, tmp_path / "blind", llm, llm_vision="false")
    async with running_gateway(blind) as gw:
        token, _ = await gw.visitor()
        upload = await _upload(gw, token, media.photo())
        await _send(gw, token, "and this?", [upload.json()["attachment_id"]])
        blind_asked = _last_user_content(llm)

    # The newest two, each after the words of its own message; the oldest in words only.
    assert [size for _, size in shown] == [(70, 40), (80, 40)]
    # (described by now, or not yet: the description is written beside the turns)
    assert isinstance(words[-3], str)
    assert "photo 0\n[image" in words[-3]
    assert all(isinstance(content, list) for content in words[-2:])
    assert blind_asked.endswith("and this?\n[image 120×80, not described]")


async def test_an_image_the_model_saw_is_described_once_and_told_so_where_notshown_image(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    def describing(body: dict[str, Any], _: int) -> Reply | None:
        asked_to_describe = body["messages"][0]["content"] == DESCRIBE_SYSTEM
        return Reply("A red square,   on white.\n") if asked_to_describe else None

    llm.responder = describing
    settings = make_settings(database_url, tmp_path, llm, media_images_in_prompt=1)
    async with running_gateway(settings) as gw:
        queue = gw.services.queue
        assert isinstance(queue, EmbeddedQueue)
        token, session = await gw.visitor()
        first = (await _upload(gw, token, media.photo())).json()["attachment_id"]
        await _send(gw, token, "what is this?", [first])
        await gw.services.runner.idle()
        await queue.idle()
        second = (await _upload(gw, token, media.photo(60, 60))).json()["attachment_id"]
        await _send(gw, token, "and this one?", [second])
        # Only the newest image is shown now: the first is told by its description.
        told = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        await gw.services.runner.idle()
        await queue.idle()
        await gw.send(token, "thanks")
        await gw.services.runner.idle()
        await queue.idle()
        url = f"/api/v1/sessions/{session}/messages"
        messages = (await gw.http.get(url, headers=ADMIN)).json()["items"]

    describing_requests = [
        r for r in llm.requests if r["messages"][0]["content"] == DESCRIBE_SYSTEM
    ]
    # One request an image, each shown the image it describes, however many turns saw it.
    assert [
        media.shown_image(r["messages"][1]["content"][1]).size for r in describing_requests
    ] == [
        (120, 80),
        (60, 60),
    ]
    assert told[-2].endswith("what is this?\n[image: A red square, on white.]")
    assert isinstance(told[-1], list)  # the second image itself
    texts = [a["text"] for m in messages for a in m["attachments"]]
    assert texts == ["A red square, on white.", "A red square, on white."]


async def test_a_large_image_is_kept_at_1568_px_and_transparency_stays(
    database_url: str, tmp_path: Path
) -> None:
    wide = io.BytesIO()
    Image.new("RGB", (4000, 3000), (10, 120, 200)).save(wide, format="PNG")
    clear = io.BytesIO()
    Image.new("RGBA", (64, 64), (0, 0, 0, 0)).save(clear, format="PNG")
    async with running_gateway(make_settings(database_url, tmp_path, None)) as gw:
        token, _ = await gw.visitor()
        large = (await _upload(gw, token, wide.getvalue(), "wide.png", "image/png")).json()
        sticker = (await _upload(gw, token, clear.getvalue(), "s.png", "image/png")).json()

    assert (large["width"], large["height"], large["mime"]) == (LONGEST_SIDE, 1176, "image/jpeg")
    assert (sticker["width"], sticker["height"], sticker["mime"]) == (64, 64, "image/png")


async def test_bad_files_are_refused_with_their_reason_and_nothing_iskept(
    database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(database_url, tmp_path, None, media_max_bytes=64 * 1024)
    page = b"<html><script>alert(1)</script></html>"
    truncated = media.photo(600, 400)[:700]
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        answers = {
            "too large": await _upload(gw, token, b"\xff" * (64 * 1024 + 1)),
            "disguised": await _upload(gw, token, page, "cat.jpg"),
            "svg": await _upload(gw, token, b"<svg xmlns='http://www.w3.org/2000/svg'/>"),
            "corrupt": await _upload(gw, token, truncated),
            "empty": await _upload(gw, token, b""),
            "bomb": await _upload(gw, token, media.bomb(), "bomb.png", "image/png"),
            "no file": await gw.http.post(
                "/webchat/uploads",
                data={"note": "x"},
                headers={"Authorization": f"Bearer {token}"},
            ),
            "no token": await gw.http.post("/webchat/uploads", files={"file": ("a.jpg", b"x")}),
        }
        async with session_factory(gw.services.engine)() as session:
            kept = await session.scalar(select(func.count()).select_from(Attachment))

    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {
        "too large": 413,
        "disguised": 415,
        "svg": 415,
        "corrupt": 422,
        "empty": 422,
        "bomb": 413,
        "no file": 422,
        "no token": 401,
    }
    reasons = {name: answers[name].json()["detail"][0]["type"] for name in ("corrupt", "empty")}
    assert reasons == {"corrupt": "corrupt", "empty": "empty"}
    assert "pixels" in answers["bomb"].json()["detail"][0]["msg"]
    assert kept == 0


async def test_only_the_uploader_can_attach_a_file_and_only_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # A model that does not see: no description is written while the test reads.
    settings = make_settings(
        database_url, tmp_path, llm, webchat_uploads_per_minute=3, llm_vision="false"
    )
    async with running_gateway(settings) as gw:
        ana, _ = await gw.visitor()
        bo, _ = await gw.visitor()
        mine = (await _upload(gw, ana, media.photo())).json()["attachment_id"]
        stolen = await _send(gw, bo, "look what I found", [mine])
        bo_history = await gw.history(bo)
        bo_reads_unsent = await _read(gw, bo, mine)
        ana_reads_unsent = await _read(gw, ana, mine)
        first = await _send(gw, ana, "my photo", [mine])
        bo_reads_sent = await _read(gw, bo, mine)
        bo_reads_nothing = await _read(gw, bo, mine + 1000)
        ana_reads_sent = await _read(gw, ana, mine)
        async with gw.socket(ana) as socket:
            await socket.send(json.dumps({"type": "resume", "after_seq": 0}))
            framed = await next_frame(socket, "message")
        again = await _send(gw, ana, "the same again", [mine])
        made_up = await _send(gw, ana, "and this", [mine + 1000])
        empty = await _send(gw, ana, "", [])
        await _upload(gw, ana, media.photo())
        await _upload(gw, ana, media.photo())
        too_many = await _upload(gw, ana, media.photo())
        ana_history = await gw.history(ana)

    assert stolen.status_code == 422
    assert "no such upload" in stolen.text
    assert bo_history == []  # nothing of Bo's was stored
    assert first.status_code == 200
    # Ana reads her own file, before and after she sent it; Bo reads it neither way,
    # and cannot tell it from a file that does not exist.
    assert (ana_reads_unsent.status_code, ana_reads_sent.status_code) == (200, 200)
    assert ana_reads_sent.content == ana_reads_unsent.content
    assert media.kept(ana_reads_sent.content).size == (120, 80)
    assert ana_reads_sent.headers["content-disposition"].startswith("attachment;")
    assert [bo_reads_unsent.status_code, bo_reads_sent.status_code] == [404, 404]
    assert bo_reads_sent.json() == bo_reads_nothing.json()
    # Her message says what it carries, in the reply to her POST, her history and
    # her socket alike.
    [carried] = first.json()["message"]["attachments"]
    assert carried | {"bytes": 0} == {
        "id": mine,
        "kind": "image",
        "mime": "image/jpeg",
        "bytes": 0,
        "state": "ready",
        "text": None,
        "width": 120,
        "height": 80,
        "file_name": "photo.jpg",
    }
    assert [m["attachments"] for m in ana_history if m["role"] == "user"] == [[carried]]
    assert framed["attachments"] == [carried]
    assert [again.status_code, made_up.status_code, empty.status_code] == [422, 422, 422]
    assert [m["text"] for m in ana_history if m["role"] == "user"] == ["my photo"]
    assert too_many.status_code == 429


async def test_erasing_a_person_removes_their_files_sent_or_only_uploaded(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, session = await gw.visitor()
        sent = (await _upload(gw, token, media.photo())).json()["attachment_id"]
        await _upload(gw, token, media.photo(90, 60))  # uploaded, never sent
        await _send(gw, token, "a photo", [sent])
        kept = (await gw.http.get(f"/api/v1/attachments/{sent}", headers=ADMIN)).content
        user_id = (await gw.http.get(f"/api/v1/sessions/{session}", headers=ADMIN)).json()[
            "user_id"
        ]
        # Some bytes of the kept image, found in the database's files before.
        needle = kept[len(kept) // 2 : len(kept) // 2 + 48]
        before = _files_with(tmp_path, needle)
        erased = await gw.http.delete(f"/api/v1/users/{user_id}", headers=ADMIN)
        async with session_factory(gw.services.engine)() as session_:
            left = await session_.scalar(select(func.count()).select_from(Attachment))

    assert erased.status_code == 200, erased.text
    assert left == 0
    if database_url.startswith("sqlite"):  # the database, -wal and -shm
        assert before
        assert _files_with(tmp_path, needle) == []


async def test_an_upload_gets_its_own_time_to_arrive_and_no_more(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(
        database_url, tmp_path, llm, read_timeout_seconds=0.5, upload_timeout_seconds=3
    )
    photo = media.photo()
    form = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="p.jpg"\r\n'
        b"Content-Type: image/jpeg\r\n\r\n" + photo + b"\r\n--B--\r\n"
    )
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        head = (
            f"POST /webchat/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: multipart/form-data; boundary=B\r\n"
            f"Content-Length: {len(form)}\r\nConnection: close\r\n\r\n"
        ).encode()
        host, port = gw.url.removeprefix("http://").split(":")
        # A slow line: the body's second half a second after its first, twice the time
        # any other body may take.
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head + form[: len(form) // 2])
        await asyncio.sleep(1.0)
        writer.write(form[len(form) // 2 :])
        async with asyncio.timeout(10):
            slow = await reader.read()
        writer.close()
        # One that never ends is cut at the upload's own limit.
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head + form[:100])
        async with asyncio.timeout(10):
            cut = await reader.read()
        writer.close()

    assert slow.startswith(b"HTTP/1.1 201"), slow[:200]
    assert cut.startswith(b"HTTP/1.1 408"), cut[:200]
    assert b"3 s" in cut


async def test_an_upload_no_message_took_is_dropped_after_a_day(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        sent = (await _upload(gw, token, media.photo())).json()["attachment_id"]
        unsent = (await _upload(gw, token, media.photo(90, 60))).json()["attachment_id"]
        await _send(gw, token, "a photo", [sent])
        attachments = gw.services.repos.attachments
        now = gw.services.clock.now()
        early = await attachments.drop_unsent(now - UNSENT_UPLOADS_KEPT)
        late = await attachments.drop_unsent(now + UNSENT_UPLOADS_KEPT)
        async with session_factory(gw.services.engine)() as session:
            left = list(await session.scalars(select(Attachment.id)))
        too_late = await _send(gw, token, "and this one", [unsent])

    assert (early, late) == (0, 1)
    assert left == [sent]  # the sent one stays, whatever its age
    assert too_late.status_code == 422


async def test_export_erase_import_gives_the_files_back_byte_for_byte(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, session = await gw.visitor()
        sent = (await _upload(gw, token, media.photo())).json()["attachment_id"]
        await _send(gw, token, "a photo", [sent])
        await gw.services.runner.idle()
        kept = (await gw.http.get(f"/api/v1/attachments/{sent}", headers=ADMIN)).content
        user_id = (await gw.http.get(f"/api/v1/sessions/{session}", headers=ADMIN)).json()[
            "user_id"
        ]
        export = (await gw.http.get(f"/api/v1/users/{user_id}/export", headers=ADMIN)).content
        await gw.http.delete(f"/api/v1/users/{user_id}", headers=ADMIN)
        ndjson = {"Content-Type": "application/x-ndjson"} | ADMIN
        tampered = await gw.http.post("/api/v1/import", content=_tamper(export), headers=ndjson)
        left = (await gw.http.get("/api/v1/users", headers=ADMIN)).json()["items"]
        imported = await gw.http.post("/api/v1/import", content=export, headers=ndjson)
        again = await gw.http.post("/api/v1/import", content=export, headers=ndjson)
        new_user = imported.json()["user_id"]
        [back] = (
            await gw.http.get("/api/v1/sessions", params={"user_id": new_user}, headers=ADMIN)
        ).json()["items"]
        messages = (
            await gw.http.get(f"/api/v1/sessions/{back['id']}/messages", headers=ADMIN)
        ).json()["items"]
        [file] = [a for m in messages for a in m["attachments"]]
        restored = (await gw.http.get(f"/api/v1/attachments/{file['id']}", headers=ADMIN)).content

    records = [json.loads(line) for line in export.splitlines()]
    [record] = [r for r in records if r.get("type") == "attachment"]
    assert records[0]["counts"]["attachments"] == 1
    assert (record["seq"], record["kind"], record["mime"]) == (1, "image", "image/jpeg")
    # Bytes that are not what the file says they are: refused, naming the line; nothing in.
    assert tampered.status_code == 422, tampered.text
    assert "sha256" in tampered.text
    assert left == []
    assert imported.status_code == 200, imported.text
    assert imported.json()["attachments"] == {"created": 1, "skipped": 0}
    assert again.json()["attachments"] == {"created": 0, "skipped": 1}
    assert restored == kept


def _tamper(export: bytes) -> bytes:
    """The export with one byte of its file changed."""
    lines = []
    for line in export.splitlines():
        record = json.loads(line)
        if record.get("type") == "attachment":
            data = bytearray(base64.b64decode(record["data"]))
            data[-3] ^= 0xFF
            record["data"] = base64.b64encode(bytes(data)).decode()
        lines.append(json.dumps(record).encode())
    return b"\n".join(lines)


def _files_with(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]
