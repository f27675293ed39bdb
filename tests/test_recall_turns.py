"""Recall through real turns, against fake OpenAI-compatible and Anthropic servers that
call tools: a detail only a transcript holds is looked up and answered from; the system
prompt is the same bytes on every call of the turn; nobody reads another's archive; a
model that never stops calling tools is stopped; web chat streams only the answer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from sqlalchemy import select

from gateway.jobs.queue import EmbeddedQueue
from gateway.reminders.tools import TOOLS as REMINDER_TOOLS
from gateway.turns.answering import ANSWER_CHARS, TOOL_LIMIT_NOTICE
from gateway.turns.file_tools import TOOLS as FILE_TOOLS
from gateway.turns.recall_tools import GUIDE, TOOLS
from gateway.turns.steps import tools_tokens
from memory.storage.engine import session_factory
from memory.storage.models import ChunkStatus, Message
from memory.token_count import estimate_tokens, message_tokens
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import Behaviour, CallTools, FakeLLM, Reply
from tests.support.archive_checks import marked_text, request_kind
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, next_frame, running_gateway
from tests.support.platforms import platform_gateway

Kind = Literal["openai", "anthropic"]
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DETAIL = "My new flat is at 42 Quai des Celestins, third floor, door code 4711."
QUESTION = "What was the door code of my new flat again?"


def _settings(database_url: str, tmp_path: Path, llm: FakeLLM, kind: Kind, **extra: Any) -> Any:
    provider = {"llm_provider": kind, "llm_base_url": llm.base_url} if kind == "anthropic" else {}
    # A 16k-token model: the archive cuts after a few thousand tokens of talk.
    values = {"llm_context_tokens": 16_000} | provider | extra
    return make_settings(database_url, tmp_path, llm, **values)


def _system(body: dict[str, Any]) -> str:
    if "system" in body:  # Anthropic
        return str(body["system"][0]["text"])
    return str(body["messages"][0]["content"])


def _is_turn(body: dict[str, Any]) -> bool:
    return _system(body).startswith("# Who you are")


def _tool_results(body: dict[str, Any]) -> list[str]:
    """What the tools returned, as the request carries it back to the model."""
    found = []
    for message in body["messages"]:
        if message.get("role") == "tool":
            found.append(str(message["content"]))
        content = message.get("content")
        if isinstance(content, list):
            found += [str(b["content"]) for b in content if b.get("type") == "tool_result"]
    return found


def _request_tokens(body: dict[str, Any]) -> int:
    """What a request holds, by the project's own estimate: every text the model reads
    (system, messages, its calls, their results) and every tool as declared."""
    texts = [str(body["system"][0]["text"])] if "system" in body else []
    for message in body["messages"]:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if isinstance(content, str):
            texts.append(content)
        for block in blocks:
            if block["type"] == "text":
                texts.append(block["text"])
            elif block["type"] == "tool_use":
                texts.append(f"{block['id']} {block['name']} {json.dumps(block['input'])}")
            elif block["type"] == "tool_result":
                texts.append(block["content"])
        texts += [json.dumps(call) for call in message.get("tool_calls") or []]
    texts += [json.dumps(tool) for tool in body.get("tools", [])]
    return sum(message_tokens(text) for text in texts)


async def _archive_talk(gw: Gateway, token: str, conversation: str, rows: int) -> list[int]:
    """Talk until the archive has `rows` summarised level-0 rows; their ids."""
    queue = gw.services.queue
    assert isinstance(queue, EmbeddedQueue)
    for number in range(1, 400):
        assert (await gw.send(token, marked_text(number, 60))).status_code == 200
        await gw.services.runner.idle()
        await queue.idle()
        chunks = await gw.services.archive.chunks(uuid.UUID(conversation))
        ready = [c.id for c in chunks if c.level == 0 and c.status is ChunkStatus.READY]
        if len(ready) >= rows:
            return ready
    raise AssertionError(f"the archive never had {rows} rows")


async def _archive_a_detail(gw: Gateway, token: str, conversation: str) -> None:
    """The detail (message 1), then hundreds of messages after it, until it is archived:
    from then on no prompt holds it, only the archive."""
    queue = gw.services.queue
    assert isinstance(queue, EmbeddedQueue)
    assert (await gw.send(token, DETAIL)).status_code == 200
    for number in range(1, 400):
        assert (await gw.send(token, marked_text(number, 60))).status_code == 200
        await gw.services.runner.idle()
        await queue.idle()
        chunks = await gw.services.archive.chunks(uuid.UUID(conversation))
        if number >= 200 and any(c.level == 0 and c.seq_start == 1 for c in chunks):
            return
    raise AssertionError("the detail was never archived")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_detail_only_a_transcript_holds_is_looked_up_and_answered(
    database_url: str, tmp_path: Path, llm: FakeLLM, kind: Kind
) -> None:
    async with running_gateway(_settings(database_url, tmp_path, llm, kind)) as gw:
        token, conversation = await gw.visitor()
        await _archive_a_detail(gw, token, conversation)
        turn_requests: list[dict[str, Any]] = []

        def model(body: dict[str, Any], number: int) -> Behaviour | None:
            if not _is_turn(body) or QUESTION not in json.dumps(body):
                return None
            turn_requests.append(body)
            results = _tool_results(body)
            if not results:
                return CallTools([("archive_search", {"query": "door code flat"})])
            # The model reads its hits for the one with a code in it.
            hit = next((h for h in results[-1].splitlines() if "4711" in h), "nothing found")
            return Reply(f"You told me: {hit.split(': ', 1)[-1]}")

        llm.responder = model
        answered = await gw.send(token, QUESTION)
        lookups = await gw.http.get(f"/api/v1/sessions/{conversation}/lookups", headers=ADMIN)
        stored = await gw.whole_history(token)

        # Another visitor's model asks for the same words and for that person's row.
        row = next(c for c in await gw.services.archive.chunks(uuid.UUID(conversation)))
        llm.responder = _one_lookup_then("archive_search", {"query": "Celestins 4711"})
        stranger, _ = await gw.visitor()
        await gw.send(stranger, "hello")
        searched = _tool_results(llm.requests[-1])
        llm.responder = _one_lookup_then("archive_read", {"chunk_id": row.id})
        await gw.send(stranger, "and again")
        read = _tool_results(llm.requests[-1])

    assert answered.status_code == 200, answered.text
    first, second = turn_requests
    assert "4711" not in json.dumps(first)  # not in the prompt: only the archive has it
    assert "archive_search" in json.dumps(first["tools"])
    [result] = _tool_results(second)
    assert result.startswith("[source: archive]\n")
    assert DETAIL in result  # the sentence as it was written
    assert "4711" in answered.json()["reply"]["text"]
    # What the tools read back is no message: not in the live window, not in a transcript.
    assert not any("[source: archive]" in m["text"] for m in stored)
    assert _system(first) == _system(second)  # byte for byte
    [lookup] = lookups.json()["items"]
    assert lookup["tool"] == "archive_search"
    assert json.loads(lookup["arguments"]) == {"query": "door code flat"}
    assert "4711" in lookup["result"]
    assert lookup["seq"] == answered.json()["message"]["seq"]
    assert "No message or transcript has all of" in searched[-1]
    assert read[-1] == f"[source: archive]\nNo archive row #{row.id} in this conversation."


def _one_lookup_then(tool: str, arguments: dict[str, Any]) -> Any:
    """A model that makes one call in a turn, then answers."""

    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        if not _is_turn(body):
            return None
        return Reply("done") if _tool_results(body) else CallTools([(tool, arguments)])

    return model


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_model_that_keeps_calling_tools_is_stopped_and_still_answers(
    database_url: str, tmp_path: Path, llm: FakeLLM, kind: Kind
) -> None:
    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        if not _is_turn(body):
            return None
        if "tools" in body:
            return CallTools(
                [("archive_search", {"query": f"try {number}"}), ("archive_expand", {"row_id": 1})]
            )
        # Offered no tools, it answers from the lookups written out in its messages.
        shown = json.dumps(body["messages"])
        return Reply(f"I looked {shown.count('returned:')} times; nothing about it.")

    llm.responder = model
    async with running_gateway(_settings(database_url, tmp_path, llm, kind)) as gw:
        token, conversation = await gw.visitor()
        first = await gw.send(token, "find it")
        calls = [b for b in llm.requests if _is_turn(b)]
        again = await gw.send(token, "find it again")
        lookups = await gw.http.get(
            f"/api/v1/sessions/{conversation}/lookups", params={"limit": 100}, headers=ADMIN
        )
        status = await gw.send(token, "/status")

    for answered in (first, again):
        assert answered.json()["reply"]["role"] == "assistant"
        assert answered.json()["reply"]["text"] == "I looked 6 times; nothing about it."
    # Six calls a turn, in three rounds of two; the fourth call declares no tools.
    assert len(calls) == 4
    assert ["tools" in c for c in calls] == [True, True, True, False]
    last = calls[-1]
    assert _tool_results(last) == []  # no tool messages or blocks: text only
    assert not any("tool_calls" in m for m in last["messages"])
    written = json.dumps([m for m in last["messages"] if m["role"] != "system"])
    assert written.count("[source: archive]") == 3  # one per round
    assert 'What archive_search {\\"query\\": \\"try 1\\"} returned:' in written
    assert "lookups are used up" in written
    assert _system(calls[0]) == _system(calls[3])
    assert len(lookups.json()["items"]) == 12
    assert status.json()["reply"]["text"].endswith(
        "Last looked up in the archive:\n"
        '- archive_expand {"row_id": 1}\n'
        '- archive_search {"query": "try 7"}\n'
        '- archive_expand {"row_id": 1}'
    )


@pytest.mark.parametrize("provider", ["openai", "offline"])
async def test_the_recall_guide_is_in_the_prompt_only_where_tools_are_offered(
    database_url: str, tmp_path: Path, llm: FakeLLM, provider: str
) -> None:
    persona = tmp_path / "persona.md"
    persona.write_text("# Who you are\nA short persona, so the guide would stand out.")
    model = llm if provider == "openai" else None
    settings = make_settings(database_url, tmp_path, model, persona_file=persona)
    assert settings.llm_max_tool_calls > 0  # tools on, as by default
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        answered = await gw.send(token, "hello")
        # What the turn's prompt came to, as stored with its reply.
        async with session_factory(gw.services.engine)() as session:
            prompt_tokens = await session.scalar(
                select(Message.prompt_tokens).where(
                    Message.conversation_id == uuid.UUID(conversation), Message.seq == 2
                )
            )

    assert answered.json()["reply"]["role"] == "assistant"
    assert prompt_tokens is not None
    if provider == "openai":
        [request] = llm.requests
        assert GUIDE in _system(request)
        assert "archive_search" in json.dumps(request["tools"])
        # The prompt as sent: its messages and the tools it declares.
        said = sum(message_tokens(str(m["content"])) for m in request["messages"])
        assert prompt_tokens == said + tools_tokens(TOOLS + REMINDER_TOOLS + FILE_TOOLS)
    else:
        assert "No language model is configured" in answered.json()["reply"]["text"]
        assert prompt_tokens < estimate_tokens(GUIDE)  # persona, clock and "hello" only


async def test_a_made_up_tool_of_any_name_gets_a_short_error_and_the_turn_answers(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    name = "archive_" + "x" * 5000
    llm.responder = _one_lookup_then(name, {"query": "anything"})
    async with running_gateway(_settings(database_url, tmp_path, llm, "openai")) as gw:
        token, conversation = await gw.visitor()
        answered = await gw.send(token, "look it up")
        lookups = await gw.http.get(f"/api/v1/sessions/{conversation}/lookups", headers=ADMIN)

    [error] = _tool_results(llm.requests[-1])
    assert answered.json()["reply"]["text"] == "done"
    assert error.startswith(f"[source: archive]\nError: there is no tool '{name[:64]}'; the tools")
    assert len(error) < 300
    [lookup] = lookups.json()["items"]
    assert lookup["tool"] == name[:64]
    assert lookup["result"] == error


async def test_a_server_that_calls_tools_it_was_not_offered_ends_with_a_notice(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        if not _is_turn(body):
            return None
        return CallTools([("archive_search", {"query": f"try {number}"})] * 2)

    llm.responder = model
    async with running_gateway(_settings(database_url, tmp_path, llm, "openai")) as gw:
        token, _ = await gw.visitor()
        answered = await gw.send(token, "find it")

    assert answered.json()["reply"]["role"] == "event"
    assert answered.json()["reply"]["text"] == TOOL_LIMIT_NOTICE
    assert len([b for b in llm.requests if _is_turn(b)]) == 4  # stopped, not looping


ANSWER = (
    "From the archive: you moved to the flat on the Quai des Celestins in March, on the "
    "third floor, and the door code you gave me then was 4711. You also said the "
    "letterbox key is with the neighbour on the second floor, in case the code fails."
)


async def _watch_a_turn(
    gw: Gateway, llm: FakeLLM, preamble: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """A web chat visitor asks; the model writes `preamble`, calls a tool, then writes
    ANSWER in five pieces. The frames the visitor's socket got (acks left out), by
    kind, and the frames themselves."""

    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        if not _is_turn(body):
            return None
        if _tool_results(body):
            return Reply(ANSWER, pieces=5)
        return CallTools([("archive_search", {"query": "door code"})], text=preamble)

    llm.responder = model
    token, _ = await gw.visitor()
    async with gw.socket(token) as ws:
        await ws.send(json.dumps({"type": "message", "text": "look it up", "client_id": "a"}))
        frames: list[dict[str, Any]] = []
        while not (frames and frames[-1]["type"] == "message" and frames[-1]["seq"] == 2):
            frame = await next_frame(ws)
            if frame["type"] != "ack":
                frames.append(frame)
    return [f["type"] for f in frames], frames


async def test_web_chat_streams_the_final_answer_only(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(_settings(database_url, tmp_path, llm, "openai")) as gw:
        kinds, frames = await _watch_a_turn(gw, llm, preamble="Let me look.")

    deltas = [f["text"] for f in frames if f["type"] == "delta"]
    assert kinds[0] == "message"  # the visitor's own, stored
    assert kinds.count("typing") == 2  # once per model call
    first_delta = kinds.index("delta")
    assert first_delta > max(i for i, kind in enumerate(kinds) if kind == "typing")
    assert "Let me look." not in "".join(deltas)  # held back, then dropped for the call
    assert "".join(deltas) == ANSWER
    assert len(deltas) > 1  # streamed, once clearly an answer
    assert len(deltas[0]) >= ANSWER_CHARS
    assert frames[-1]["text"] == ANSWER


async def test_a_long_text_before_a_tool_call_is_withdrawn(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    preamble = "I'll search the archive for it. " * 6  # long enough to pass for an answer
    assert len(preamble) >= ANSWER_CHARS
    async with running_gateway(_settings(database_url, tmp_path, llm, "openai")) as gw:
        kinds, frames = await _watch_a_turn(gw, llm, preamble=preamble)

    last_typing = max(i for i, kind in enumerate(kinds) if kind == "typing")
    before = "".join(f["text"] for f in frames[:last_typing] if f["type"] == "delta")
    after = "".join(f["text"] for f in frames[last_typing:] if f["type"] == "delta")
    assert kinds.count("typing") == 2
    assert before == preamble  # streamed, then withdrawn by the typing frame after it
    assert after == ANSWER
    assert frames[-1]["text"] == ANSWER


# What a model that writes long summaries makes of a chunk: about 900 tokens, so four
# rows are more than an 8k model's timeline holds.
LONG_SUMMARY = " ".join(f"s{k} long summary words" for k in range(160))


def _is_summary(body: dict[str, Any]) -> bool:
    return _system(body).startswith("You keep the archive")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_on_a_small_model_with_a_full_timeline_every_call_gets_its_newest_results(
    database_url: str, tmp_path: Path, llm: FakeLLM, kind: Kind
) -> None:
    settings = _settings(database_url, tmp_path, llm, kind, llm_context_tokens=8_000)
    window = settings.llm_context_tokens - settings.llm_max_reply_tokens
    turn: list[dict[str, Any]] = []
    rows: list[int] = []

    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        if _is_summary(body):
            return Reply(LONG_SUMMARY)
        if not _is_turn(body) or "Read it all." not in json.dumps(body):
            return None
        turn.append(body)
        if "tools" not in body:
            return Reply("All read.")
        first = 2 * (len(turn) - 1)
        reads = [("archive_read", {"chunk_id": rows[(first + i) % len(rows)]}) for i in (0, 1)]
        return CallTools(list[tuple[str, dict[str, Any] | str]](reads))

    llm.responder = model
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        rows += await _archive_talk(gw, token, conversation, rows=4)
        answered = await gw.send(token, "Read it all.")
        lookups = await gw.http.get(f"/api/v1/sessions/{conversation}/lookups", headers=ADMIN)

    assert answered.json()["reply"]["text"] == "All read."
    results = [item["result"] for item in lookups.json()["items"]][::-1]  # oldest first
    assert len(results) == 6
    assert len(turn) == 4
    # The timeline is full: the system prompt had to leave rows out.
    assert "older archive rows left out for space" in _system(turn[0])
    assert all(_system(body) == _system(turn[0]) for body in turn)
    sizes = [_request_tokens(body) for body in turn]
    assert max(sizes) <= window, sizes
    # Carried whole, the six results would not have fitted beside the rest.
    assert sizes[0] + sum(message_tokens(result) for result in results) > window
    for number, body in enumerate(turn[1:], start=1):
        newest = results[2 * number - 2 : 2 * number]
        if "tools" in body:
            assert _tool_results(body)[-2:] == newest, f"call {number + 1}"
        else:
            written = json.dumps([m for m in body["messages"] if m["role"] != "system"])
            for result in newest:
                assert json.dumps(result.removeprefix("[source: archive]\n"))[1:-1] in written
    # The room was tight: an older round's results gave way to the newer ones.
    assert "left out to make room" in json.dumps(turn[-1])


def _replies(chat: int, count: int) -> Callable[[tg.FakeTelegram], bool]:
    """Whether the bot has sent `count` messages to `chat`."""
    return lambda fake: len(fake.texts(chat)) == count


async def test_a_group_turn_reads_nothing_of_a_members_own_conversation(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    secret = "My bank PIN is qxsecretpin 4711, keep it between us."
    group = tg.group_chat()
    ann = 5555
    rows: list[int] = []
    results: dict[str, list[str]] = {}

    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        asked = next(
            (q for q in ("qxgroupquestion", "qxownquestion") if q in json.dumps(body)), None
        )
        if not _is_turn(body) or asked is None:
            return None
        if found := _tool_results(body):
            results[asked] = found
            return Reply("That is all I found.")
        if asked == "qxownquestion":
            return CallTools([("archive_search", {"query": "qxsecretpin"})])
        return CallTools(
            [
                ("archive_search", {"query": "qxsecretpin"}),
                ("archive_read", {"chunk_id": rows[0], "around": "qxsecretpin"}),
                ("archive_expand", {"row_id": rows[0]}),
                ("retired_facts_search", {"query": "PIN"}),
            ]
        )

    llm.responder = model
    # An 8k model: Ann's own conversation is archived after a few messages.
    async with platform_gateway(database_url, tmp_path, llm, llm_context_tokens=8_000) as p:
        queue = p.gw.services.queue
        assert isinstance(queue, EmbeddedQueue)
        for number in range(60):
            text = secret if number == 0 else marked_text(number, 60)
            await p.telegram(tg.text_update(ann, text, first_name="Ann"))
            await p.tg.wait_until(_replies(ann, number + 1))
            await queue.idle()
            [own] = [s for s in await p.sessions() if s["kind"] == "personal"]
            chunks = await p.gw.services.archive.chunks(uuid.UUID(own["id"]))
            rows = [c.id for c in chunks if c.level == 0 and c.seq_start == 1]
            if rows:
                break
        assert rows, "Ann's first words were never archived"

        mention = f"@{tg.BOT_USERNAME} qxgroupquestion: what is Ann's PIN?"
        await p.telegram(tg.mention_update(ann, mention, group, first_name="Ann"))
        await p.tg.wait_until(lambda f: len(f.texts(group["id"])) == 1)
        sent = len(p.tg.texts(ann))
        await p.telegram(tg.text_update(ann, "qxownquestion: my PIN?", first_name="Ann"))
        await p.tg.wait_until(_replies(ann, sent + 1))

    searched, read, expanded, retired = results["qxgroupquestion"]
    assert p.tg.texts(group["id"]) == ["That is all I found."]
    assert searched.endswith("No message or transcript has all of: qxsecretpin.")
    assert read.endswith(f"No archive row #{rows[0]} in this conversation.")
    assert expanded.endswith(f"No archive row #{rows[0]} in this conversation.")
    assert retired.endswith("A group conversation has no profile, so no retired facts.")
    assert not any("4711" in result for result in results["qxgroupquestion"])
    # The same search in her own conversation finds it: there was something to keep out.
    assert secret in results["qxownquestion"][0]


async def test_what_the_tools_read_back_never_reaches_profile_extraction(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    question = "qxlookupquestion: did I ever mention it?"

    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        asks = [m for m in body["messages"] if m["role"] == "user"][-1:]
        if not _is_turn(body) or question not in json.dumps(asks):
            return None  # not the turn that answers the question
        if _tool_results(body):
            return Reply("No, never.")
        return CallTools([("archive_search", {"query": "qxtoolonlyword"})])

    llm.responder = model
    settings = _settings(database_url, tmp_path, llm, "openai", llm_context_tokens=8_000)
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        asked = await gw.send(token, question)
        queue = gw.services.queue
        assert isinstance(queue, EmbeddedQueue)
        extractions: list[dict[str, Any]] = []
        for number in range(1, 100):  # until the turn's chunk gave its facts
            assert (await gw.send(token, marked_text(number, 60))).status_code == 200
            await gw.services.runner.idle()
            await queue.idle()
            extractions = [b for b in llm.requests if request_kind(b) == "extract"]
            if any(question in json.dumps(b) for b in extractions):
                break
        lookups = await gw.http.get(f"/api/v1/sessions/{conversation}/lookups", headers=ADMIN)

    assert asked.json()["reply"]["text"] == "No, never."
    [lookup] = lookups.json()["items"]
    assert lookup["result"].startswith("[source: archive]\n")
    assert "qxtoolonlyword" in lookup["result"]  # what the tool said, and only it
    extraction = next(b for b in extractions if question in json.dumps(b))
    assert "No, never." in json.dumps(extraction)  # the turn's answer is context
    assert "[source: archive]" not in json.dumps(extraction)
    assert "qxtoolonlyword" not in json.dumps(extraction)
