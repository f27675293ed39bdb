"""A conversation of over 300,000 tokens through real turns: the prompt stays bounded,
the archive covers everything exactly once, and every message stays readable."""

from __future__ import annotations

import uuid
from pathlib import Path

from gateway.jobs.queue import EmbeddedQueue
from memory.token_count import estimate_tokens
from tests.fakes.llm_server import FakeLLM
from tests.support.archive_checks import (
    chat_requests,
    check_levels,
    check_prompt,
    marked_text,
)
from tests.support.harness import make_settings, running_gateway

TOTAL_TOKENS = 300_000
WORDS_PER_MESSAGE = 800  # about 1,000 estimated tokens


def _prompt_tokens(request: dict[str, object]) -> int:
    messages = request["messages"]
    assert isinstance(messages, list)
    return sum(estimate_tokens(str(m["content"])) + 4 for m in messages)


async def test_a_long_conversation_stays_bounded_and_loses_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # A 16k-token model: every memory number shrinks to an eighth of its default.
    settings = make_settings(database_url, tmp_path, llm, llm_context_tokens=16_000)
    sent: dict[int, str] = {}
    seq_of: dict[int, int] = {}
    async with running_gateway(settings) as gw:
        services = gw.services
        queue = services.queue
        assert isinstance(queue, EmbeddedQueue)
        limits = services.archive.limits
        token, conversation = await gw.visitor()
        conversation_id = uuid.UUID(conversation)
        number = 0
        while sum(estimate_tokens(t) for t in sent.values()) < TOTAL_TOKENS:
            number += 1
            sent[number] = marked_text(number, WORDS_PER_MESSAGE)
            response = await gw.send(token, sent[number])
            assert response.status_code == 200
            seq_of[number] = response.json()["message"]["seq"]
            await check_prompt(services, conversation_id, chat_requests(llm.requests)[-1], seq_of)
            await services.runner.idle()  # the turn cut its chunks after answering
            await queue.idle()  # summaries written; the next turn swaps them in
        chunks = await services.archive.chunks(conversation_id)
        history = await gw.history(token)
        while len(history) % 500 == 0 and history:
            history += await gw.history(token, after_seq=history[-1]["seq"])
        transcripts = {c.id: await services.archive.transcript(c.id) for c in chunks}
        files = list((tmp_path / "archive" / conversation).glob("*.txt"))

    check_levels(chunks)
    levels = max(c.level for c in chunks)
    assert levels >= 2, "the history should have rolled up past consolidation"
    # Bound: persona + clock + timeline rows x summary size + live window + one message.
    summary_cap = max(estimate_tokens(c.summary or "") for c in chunks) + 30
    message_cap = max(estimate_tokens(t) for t in sent.values()) + 40
    persona_and_clock = estimate_tokens(
        str(chat_requests(llm.requests)[0]["messages"][0]["content"])
    )
    bound = (
        persona_and_clock
        + limits.max_timeline_rows(levels) * summary_cap
        + limits.live_window_tokens
        + 2 * message_cap
    )
    sizes = [_prompt_tokens(r) for r in chat_requests(llm.requests)]
    assert max(sizes) <= bound
    assert max(sizes) <= settings.llm_context_tokens - settings.llm_max_reply_tokens
    later = sizes[len(sizes) // 2 :]
    assert max(later) <= max(sizes[len(sizes) // 4 : len(sizes) // 2]) * 1.25
    # Verbatim: every message is still there word for word, and in its transcript.
    texts = {m["text"] for m in history if m["role"] == "user"}
    assert set(sent.values()) <= texts
    archived_text = "".join(t or "" for t in transcripts.values())
    archived = [
        n
        for n, s in seq_of.items()
        if any(c.level == 0 and c.seq_start <= s <= c.seq_end for c in chunks)
    ]
    assert len(archived) > len(sent) * 0.9
    for n in archived:
        assert sent[n] in archived_text
    assert len(files) == sum(c.level == 0 for c in chunks)
