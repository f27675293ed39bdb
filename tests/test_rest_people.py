"""People over the operator API and in their own chats: export → erase → import gives
back every message and transcript; erasure leaves no row, file or byte of them; a
person's `/export`, `/erase` and `/help` from a chat."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.archive_checks import archived
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, running_gateway
from tests.support.platforms import Platforms, platform_gateway
from tests.support.polling import eventually

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
NDJSON = {"Content-Type": "application/x-ndjson"}
# Lower case and unlike any other word, as a full-text index keeps its terms.
MARKER = "qzmarkerwombat"
CHAT = 4242


async def _history(gw: Gateway, session: str) -> list[dict[str, Any]]:
    url = f"/api/v1/sessions/{session}/messages"
    page = (await gw.http.get(url, params={"limit": 1000}, headers=ADMIN)).json()
    assert page["next_cursor"] is None
    return list(page["items"])


async def _transcripts(gw: Gateway, session: str) -> list[str]:
    rows = (await gw.http.get(f"/api/v1/sessions/{session}/timeline", headers=ADMIN)).json()
    chunks = [
        (await gw.http.get(f"/api/v1/chunks/{row['id']}", headers=ADMIN)).json()
        for row in rows["rows"]
    ]
    return [c["transcript"] for c in chunks if c["transcript"]]


def _files_with(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def _kept(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(m["seq"], m["role"], m["text"], m["created_at"]) for m in messages]


async def test_export_erase_import_restores_everything_and_erasure_leaves_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm, llm_context_tokens=16_000)
    async with running_gateway(settings) as gw:
        token, session = await gw.visitor()
        await archived(gw, token, session, words=MARKER)
        user_id = (await gw.http.get(f"/api/v1/sessions/{session}", headers=ADMIN)).json()[
            "user_id"
        ]
        before, transcripts = await _history(gw, session), await _transcripts(gw, session)
        export = await gw.http.get(f"/api/v1/users/{user_id}/export", headers=ADMIN)
        erased = await gw.http.delete(f"/api/v1/users/{user_id}", headers=ADMIN)
        gone = await gw.http.get(f"/api/v1/users/{user_id}", headers=ADMIN)
        left = _files_with(tmp_path, MARKER) if "sqlite" in database_url else []
        first = await gw.http.post("/api/v1/import", content=export.content, headers=ADMIN | NDJSON)
        again = await gw.http.post("/api/v1/import", content=export.content, headers=ADMIN | NDJSON)
        newer = export.text.replace('"version":1', '"version":99', 1)
        refused = await gw.http.post("/api/v1/import", content=newer, headers=ADMIN | NDJSON)
        new_id = first.json()["user_id"]
        restored_user = (await gw.http.get(f"/api/v1/users/{new_id}", headers=ADMIN)).json()
        restored = restored_user["conversations"][0]
        after = await _history(gw, restored)
        transcripts_after = await _transcripts(gw, restored)

    header = json.loads(export.text.splitlines()[0])
    assert export.headers["content-type"].startswith("application/x-ndjson")
    assert header["counts"]["messages"] == len(before)
    assert erased.status_code == 200, erased.text
    counts = erased.json()
    assert counts["messages"] == len(before)
    assert counts["identities"] == 1
    assert counts["transcript_files"] >= 1
    assert gone.status_code == 404
    assert left == []
    assert first.status_code == 200, first.text
    assert first.json()["messages"] == {"created": len(before), "skipped": 0}
    assert again.json()["messages"] == {"created": 0, "skipped": len(before)}
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "invalid_export"
    assert _kept(after) == _kept(before)
    assert transcripts_after == transcripts


async def test_erasing_and_deleting_drop_what_this_replica_keeps_in_memory(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # Turns keep a conversation's live window in memory: erased text must leave it too.
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        runner = gw.services.runner
        ann, ann_session = await gw.visitor()
        bob, bob_session = await gw.visitor()
        await gw.send(ann, f"hello {MARKER}")
        await gw.send(bob, "hello")
        kept = [runner.keeps(uuid.UUID(s)) for s in (ann_session, bob_session)]
        ann_id = (await gw.http.get(f"/api/v1/sessions/{ann_session}", headers=ADMIN)).json()[
            "user_id"
        ]
        erased = await gw.http.delete(f"/api/v1/users/{ann_id}", headers=ADMIN)
        after_erasure = runner.keeps(uuid.UUID(ann_session))
        deleted = await gw.http.delete(f"/api/v1/sessions/{bob_session}", headers=ADMIN)
        after_deletion = runner.keeps(uuid.UUID(bob_session))

    assert kept == [True, True]
    assert (erased.status_code, deleted.status_code) == (200, 200)
    assert (after_erasure, after_deletion) == (False, False)


async def test_deleting_a_session_counts_what_went_and_forgets_kept_answers(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, session = await gw.visitor()
        await gw.send(token, "hello")
        url = f"/api/v1/sessions/{session}/messages"
        key = ADMIN | {"Idempotency-Key": "before-delete"}
        sent = await gw.http.post(url, json={"text": f"about {MARKER}"}, headers=key)
        deleted = await gw.http.delete(f"/api/v1/sessions/{session}", headers=ADMIN)
        replay = await gw.http.post(url, json={"text": f"about {MARKER}"}, headers=key)
        old = await gw.http.get(f"/api/v1/sessions/{session}", headers=ADMIN)
        person = (await gw.http.get("/api/v1/users", headers=ADMIN)).json()["items"][0]
        fresh = await _history(gw, person["conversations"][0])
        missing = await gw.http.delete(
            "/api/v1/sessions/00000000-0000-0000-0000-000000000000", headers=ADMIN
        )

    assert sent.status_code == 201
    assert deleted.json() == {
        "messages": 3,
        "chunks": 0,
        "transcripts": 0,
        "transcript_files": 0,
        "jobs": 0,
        "deliveries": 0,
    }
    # The kept answer quoted the conversation: it went with it, so the key runs anew
    # (and finds the conversation gone: the person starts afresh in a new one).
    assert replay.status_code == 404
    assert old.status_code == 404
    assert person["conversations"] != [session]
    assert fresh == []
    assert missing.status_code == 404


async def _say(p: Platforms, text: str) -> None:
    """Send `text` from the person and wait for the answer to it."""
    answered = len(p.tg.texts(CHAT)) + 1
    await p.telegram(tg.text_update(CHAT, text))
    await p.tg.wait_until(lambda fake: len(fake.texts(CHAT)) >= answered)


async def test_a_person_exports_and_erases_themselves_from_a_chat(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(
        database_url, tmp_path, llm, public_url="https://parley.example"
    ) as p:
        for text in ("/help", f"remember {MARKER}", "/export"):
            await _say(p, text)
        link = next(w for w in p.tg.texts(CHAT)[-1].split() if w.startswith("https://"))
        path = link.removeprefix("https://parley.example")
        # The link opens a page; its Download button posts (test_export_links).
        download = await p.gw.http.post(path)
        twice = await p.gw.http.post(path)
        await p.telegram(tg.text_update(CHAT, "/erase"))
        await p.tg.wait_until(lambda f: "/erase " in f.texts(CHAT)[-1])
        code = p.tg.texts(CHAT)[-1].split("/erase ")[1].split()[0]
        await p.telegram(tg.text_update(CHAT, "/erase WRONGCODE"))
        await p.tg.wait_until(lambda f: "wrong" in f.texts(CHAT)[-1])
        await p.telegram(tg.text_update(CHAT, f"/erase {code}"))
        await p.tg.wait_until(lambda f: f.texts(CHAT)[-1].startswith("Done"))
        users = await eventually(
            lambda: p.gw.http.get("/api/v1/users", headers=ADMIN),
            until=lambda r: r.json()["items"] == [],
        )

    help_text = p.tg.texts(CHAT)[0]
    assert "/export" in help_text
    assert "/erase" in help_text
    assert "/link" in help_text
    assert download.status_code == 200
    assert MARKER in download.text
    assert twice.status_code == 404
    assert users.json()["items"] == []
