"""The operator API end to end: paging with signed cursors, edits guarded by ETags,
idempotent POSTs, and the authorization every route demands."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from gateway.http.api.once import KEY_LIFETIME
from memory.profile.facts import Fact
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.archive_checks import archived, request_kind
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, running_gateway

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ZERO = "00000000-0000-0000-0000-000000000000"


def _concrete(path: str) -> str:
    """A path of the OpenAPI document with made-up values for its parameters."""
    values = {"chunk_id": "1", "message_id": "1", "code": "ABCD", "job_id": "summarize:1"}
    return re.sub(r"\\{(\\w+)\\}", lambda m: values.get(m.group(1), ZERO), path)


async def _operations(gw: Gateway) -> list[tuple[str, str]]:
    document = (await gw.http.get("/openapi.json")).json()
    return [
        (method.upper(), _concrete(path))
        for path, item in document["paths"].items()
        if path.startswith("/api/v1")
        for method in item
    ]


async def test_every_route_refuses_without_the_admin_token(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        visitor, _ = await gw.visitor()
        operations = await _operations(gw)
        refused: dict[tuple[str, str, str], int] = {}
        for method, path in operations:
            for name, headers in {
                "none": {},
                "wrong": {"Authorization": "Bearer not-the-admin-token-at-all"},
                "visitor": {"Authorization": f"Bearer {visitor}"},
                "basic": {"Authorization": f"Basic {ADMIN_TOKEN}"},
            }.items():
                response = await gw.http.request(method, path, headers=headers, json={})
                refused[(method, path, name)] = response.status_code
                assert response.json()["error"]["code"] == "unauthorized", (method, path)
    off = make_settings(database_url, tmp_path / "off", llm, admin_token=None)
    async with running_gateway(off) as gw:
        unavailable = {
            (method, path): (await gw.http.request(method, path, headers=ADMIN)).status_code
            for method, path in operations
        }

    assert len(operations) >= 20
    assert set(refused.values()) == {401}
    assert set(unavailable.values()) == {503}


async def test_cursors_are_signed_and_bound_to_their_list(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        for _ in range(5):
            await gw.visitor()
        pages: list[list[str]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
            body = (await gw.http.get("/api/v1/sessions", params=params, headers=ADMIN)).json()
            pages.append([s["id"] for s in body["items"]])
            cursor = body["next_cursor"]
            if cursor is None:
                break
        first = (await gw.http.get("/api/v1/sessions", params={"limit": 2}, headers=ADMIN)).json()
        good = first["next_cursor"]
        payload, signature = good.split(".")
        forged = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + signature
        answers = {
            "forged": await gw.http.get(
                "/api/v1/sessions", params={"cursor": forged}, headers=ADMIN
            ),
            "garbage": await gw.http.get(
                "/api/v1/sessions", params={"cursor": "%%%.@@"}, headers=ADMIN
            ),
            "other filter": await gw.http.get(
                "/api/v1/sessions", params={"cursor": good, "kind": "group"}, headers=ADMIN
            ),
            "other list": await gw.http.get(
                "/api/v1/users", params={"cursor": good}, headers=ADMIN
            ),
        }

    assert [len(p) for p in pages] == [2, 2, 1]
    assert len({i for p in pages for i in p}) == 5
    for name, response in answers.items():
        assert response.status_code == 422, name
        assert response.json()["error"]["code"] == "invalid_cursor", name


async def test_session_detail_and_edits(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, session = await gw.visitor()
        await gw.send(token, "hello")
        url = f"/api/v1/sessions/{session}"
        detail = await gw.http.get(url, headers=ADMIN)
        etag = detail.headers["ETag"]
        renamed = await gw.http.patch(
            url,
            json={"title": "Ada", "timezone": "Europe/Paris"},
            headers=ADMIN | {"If-Match": etag},
        )
        stale = await gw.http.patch(url, json={"title": "Bob"}, headers=ADMIN | {"If-Match": etag})
        refused = {
            "read-only": await gw.http.patch(url, json={"id": ZERO}, headers=ADMIN),
            "unknown": await gw.http.patch(url, json={"titel": "x"}, headers=ADMIN),
            "empty": await gw.http.patch(url, json={}, headers=ADMIN),
            "zone": await gw.http.patch(url, json={"timezone": "Mars/Olympus"}, headers=ADMIN),
        }
        after = (await gw.http.get(url, headers=ADMIN)).json()
        by_title = await gw.http.get("/api/v1/sessions", params={"q": "ad"}, headers=ADMIN)
        by_channel = await gw.http.get(
            "/api/v1/sessions", params={"channel": "telegram"}, headers=ADMIN
        )

    body = detail.json()
    assert body["identities"][0]["channel"] == "webchat"
    assert body["live_tokens"] > 0
    assert body["chunks"] == []
    assert body["pending_jobs"] == 0
    assert body["last_archive_error"] is None
    assert renamed.status_code == 200, renamed.text
    assert renamed.headers["ETag"] != etag
    assert stale.status_code == 412
    assert stale.json()["error"]["code"] == "precondition_failed"
    assert {k: r.status_code for k, r in refused.items()} == dict.fromkeys(refused, 422)
    assert (after["title"], after["timezone"]) == ("Ada", "Europe/Paris")
    assert [s["id"] for s in by_title.json()["items"]] == [session]
    assert by_channel.json()["items"] == []


async def test_an_operator_message_is_sent_once_per_idempotency_key(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, session = await gw.visitor()
        await gw.send(token, "hi")
        url = f"/api/v1/sessions/{session}/messages"
        key = {"Idempotency-Key": "op-1"}
        first = await gw.http.post(url, json={"text": "We are back."}, headers=ADMIN | key)
        again = await gw.http.post(url, json={"text": "We are back."}, headers=ADMIN | key)
        other = await gw.http.post(url, json={"text": "Something else"}, headers=ADMIN | key)
        both = await gw.http.post(url, json={"text": "a", "instruction": "b"}, headers=ADMIN)
        history = await gw.history(token)

    assert first.status_code == 201, first.text
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert both.status_code == 422
    sent = first.json()
    assert (sent["source"], sent["role"], sent["channel"]) == (
        "operator via REST",
        "event",
        "webchat",
    )
    assert [m["text"] for m in history].count("We are back.") == 1
    assert KEY_LIFETIME.total_seconds() == 24 * 3600


async def test_the_profile_is_edited_by_line_against_its_etag(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        user_id = await _person_with_profile(
            gw, ["Lives in Lyon, France, near the river", "Has a cat"]
        )
        url = f"/api/v1/users/{user_id}/profile"
        read = await gw.http.get(url, headers=ADMIN)
        etag = read.headers["ETag"]
        edits = {"edits": [{"shorten": 1, "to": "Lives in Lyon"}]}
        missing = await gw.http.patch(url, json=edits, headers=ADMIN)
        edited = await gw.http.patch(url, json=edits, headers=ADMIN | {"If-Match": etag})
        stale = await gw.http.patch(
            url, json={"edits": [{"remove": [2]}]}, headers=ADMIN | {"If-Match": etag}
        )
        bad = await gw.http.patch(
            url,
            json={"edits": [{"remove": [9]}]},
            headers=ADMIN | {"If-Match": edited.headers["ETag"]},
        )
        retired = await gw.http.get(f"/api/v1/users/{user_id}/retired-facts", headers=ADMIN)

    assert [line["text"] for line in read.json()["lines"]] == [
        "Lives in Lyon, France, near the river",
        "Has a cat",
    ]
    assert missing.status_code == 428
    assert edited.status_code == 200, edited.text
    assert [line["text"] for line in edited.json()["lines"]] == ["Lives in Lyon", "Has a cat"]
    assert stale.status_code == 412
    assert bad.status_code == 422
    assert [(f["text"], f["reason"]) for f in retired.json()["items"]] == [
        ("Lives in Lyon, France, near the river", "shortened")
    ]


async def test_an_operator_corrects_a_line_with_a_longer_one(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    """Only tidying must shrink the profile: an operator's correction may be longer. The
    revision still guards the edit, and the replaced line goes to the retired facts."""
    corrected = "Tomas moved from Oslo to Bergen last spring"
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        user_id = await _person_with_profile(gw, ["Tomas lives in Oslo", "Has a cat"])
        url = f"/api/v1/users/{user_id}/profile"
        etag = (await gw.http.get(url, headers=ADMIN)).headers["ETag"]
        replace = {"edits": [{"replace": [1], "with": corrected}]}
        edited = await gw.http.patch(url, json=replace, headers=ADMIN | {"If-Match": etag})
        stale = await gw.http.patch(url, json=replace, headers=ADMIN | {"If-Match": etag})
        # `shorten` says what it does: a longer text is a replacement.
        lengthen = await gw.http.patch(
            url,
            json={"edits": [{"shorten": 2, "to": "Has a cat called Mons"}]},
            headers=ADMIN | {"If-Match": edited.headers["ETag"]},
        )
        now = await gw.http.get(url, headers=ADMIN)
        retired = await gw.http.get(f"/api/v1/users/{user_id}/retired-facts", headers=ADMIN)
        changes = await gw.http.get(f"{url}/changes", headers=ADMIN)

    assert edited.status_code == 200, edited.text
    assert [line["text"] for line in edited.json()["lines"]] == [corrected, "Has a cat"]
    assert stale.status_code == 412
    assert lengthen.status_code == 422
    assert "replace" in lengthen.json()["error"]["message"]
    assert [line["text"] for line in now.json()["lines"]] == [corrected, "Has a cat"]
    assert [(f["text"], f["reason"]) for f in retired.json()["items"]] == [
        ("Tomas lives in Oslo", "replaced")
    ]
    newest = changes.json()["items"][0]
    assert (newest["by"], newest["added"], newest["removed"]) == (
        "operator",
        [corrected],
        ["Tomas lives in Oslo"],
    )


async def _person_with_profile(gw: Gateway, lines: list[str]) -> str:
    """A new web chat visitor's user id, their profile holding `lines`."""
    _, session = await gw.visitor()
    detail = await gw.http.get(f"/api/v1/sessions/{session}", headers=ADMIN)
    user_id: str = detail.json()["user_id"]
    facts = [Fact(line) for line in lines]
    now = gw.services.clock.now()
    await gw.services.profiles.append(uuid.UUID(user_id), facts, now, chunk_id=None)
    return user_id


async def test_search_timeline_and_chunks_over_an_archived_conversation(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm, llm_context_tokens=16_000)
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        rows = await archived(gw, token, conversation)
        row = rows[0]
        chunk = (await gw.http.get(f"/api/v1/chunks/{row['id']}", headers=ADMIN)).json()
        search = f"/api/v1/sessions/{conversation}/search"
        found = (await gw.http.get(search, params={"q": "M00001"}, headers=ADMIN)).json()
        hostile = await gw.http.get(search, params={"q": 'NEAR( "a* OR'}, headers=ADMIN)
        naive = await gw.http.get(
            search, params={"q": "m00001", "from": "2026-01-01T00:00:00"}, headers=ADMIN
        )
        again = await gw.http.post(
            f"/api/v1/chunks/{row['id']}/resummarize", headers=ADMIN | {"Idempotency-Key": "r1"}
        )
        await gw.services.queue.idle()  # type: ignore[attr-defined]
        after = (await gw.http.get(f"/api/v1/chunks/{row['id']}", headers=ADMIN)).json()
        summaries = len([r for r in llm.requests if request_kind(r) == "summary"])

    assert row["state"] == "ready"
    assert row["summary"]
    assert chunk["transcript"].count("m00001") == 1
    assert chunk["conversation_id"] == conversation
    kinds = {hit["kind"] for hit in found["items"]}
    assert kinds == {"message", "chunk"}, found
    chunk_hit = next(hit for hit in found["items"] if hit["kind"] == "chunk")
    assert chunk_hit["chunk_id"] == row["id"]
    assert "«m00001»" in chunk_hit["snippet"]
    assert hostile.status_code == 200
    assert naive.status_code == 422
    assert again.status_code == 202, again.text
    assert after["state"] == "ready"
    assert after["attempts"] == 1
    assert summaries >= 2


async def test_the_assistant_writes_an_operator_message_from_an_instruction(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    offline = make_settings(database_url, tmp_path / "offline", None)
    async with running_gateway(offline) as gw:
        token, session = await gw.visitor()
        await gw.send(token, "hi")
        refused = await gw.http.post(
            f"/api/v1/sessions/{session}/messages", json={"instruction": "say hi"}, headers=ADMIN
        )
    llm.script(Reply("We will be down on Sunday night."))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, session = await gw.visitor()
        written = await gw.http.post(
            f"/api/v1/sessions/{session}/messages",
            json={"instruction": "tell them about Sunday's maintenance"},
            headers=ADMIN,
        )
        nobody = written
        await gw.send(token, "hello")
        llm.script(Reply("We will be down on Sunday night."))
        written = await gw.http.post(
            f"/api/v1/sessions/{session}/messages",
            json={"instruction": "tell them about Sunday's maintenance"},
            headers=ADMIN,
        )
        history = await gw.history(token)
        usage = await gw.http.get("/api/v1/usage", headers=ADMIN)

    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "no_model"
    # Composing costs tokens too: counted for the person, apart from their turns.
    [day] = usage.json()["rows"]
    assert (day["turns"]["calls"], day["background"]["calls"]) == (1, 1)
    assert nobody.status_code == 422
    assert nobody.json()["error"]["code"] == "no_recipient"
    assert written.status_code == 201, written.text
    assert written.json()["text"] == "We will be down on Sunday night."
    assert history[-1]["text"] == "We will be down on Sunday night."
    assert "[source: operator via REST]" in str(llm.requests[-1]["messages"])
