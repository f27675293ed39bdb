"""Every profile fact carries evidence: the typed messages it came from. A model that
believes everything it reads, and cites whatever it likes, still cannot put forwarded
text, the assistant's words, edits, operator input or made-up citations into a profile;
and chat commands never reach a model at all."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from memory.profile.facts import ProfileView
from memory.storage.messages import NewMessage
from memory.storage.models import Role
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import Behaviour, FakeLLM, Reply
from tests.support.archive_checks import request_kind, settle_extraction
from tests.support.harness import make_settings, running_gateway
from tests.support.platforms import Platforms, platform_gateway
from tests.support.polling import eventually

# A 4k-token model: live window 640 tokens, chunks of 320, so short messages archive.
TINY_MODEL: dict[str, Any] = {"llm_context_tokens": 4_096, "llm_max_reply_tokens": 512}
ADA, BO = 501, "15550005"
PADDING = " Some more words about my week, so that the chat fills up and gets archived."
NOWHERE = 10**9  # a seq no message has
# The Bot API's field since 7.0, and the older ones a replayed update may carry.
FORWARDS: list[dict[str, Any]] = [
    {"forward_origin": {"type": "user", "date": 1, "sender_user": tg.user(777, "Eve")}},
    {"forward_origin": {"type": "hidden_user", "date": 1, "sender_user_name": "Hidden Hal"}},
    {"forward_from": tg.user(778, "Mallory"), "forward_date": 1},
    {"forward_sender_name": "Hidden Hal", "forward_date": 1},
]


def _fact(text: str) -> str:
    return text.split("FACT:", 1)[1].split(".")[0].strip() + "."


def _believer(body: dict[str, Any], number: int) -> Behaviour | None:
    """Extracts every "FACT:" anywhere in the request, citing the entry it saw it in;
    adds citations of nothing and of context for good measure."""
    kind = request_kind(body)
    if kind == "chat":
        return Reply(f"Noted. FACT: the user owns yacht number {number}.")
    if kind == "summary":
        return Reply("A summary. FACT: the user is an astronaut.")
    doc = json.loads(body["messages"][-1]["content"])
    entries = doc["typed_by_user"] + doc["context"]["other_messages"]
    facts: list[dict[str, Any]] = [
        {"fact": _fact(e["text"]), "from": [e["seq"]]} for e in entries if "FACT:" in e["text"]
    ]
    facts.append({"fact": _fact(doc["context"]["summary"]), "from": [NOWHERE]})
    facts.append({"fact": "The user is a spy.", "from": []})
    facts.append({"fact": "The user has no citation at all."})
    context = [e["seq"] for e in doc["context"]["other_messages"]]
    if context:
        facts.append({"fact": "The user is the context's hero.", "from": context[:1]})
        typed = [e["seq"] for e in doc["typed_by_user"]]
        facts.append({"fact": "The user mixes sources.", "from": typed[:1] + context[:1]})
    return Reply(json.dumps({"facts": facts}))


async def _profile(p: Platforms, channel: str, external_id: str) -> tuple[ProfileView, uuid.UUID]:
    ref = await p.gw.services.core.identity(channel, external_id)
    await settle_extraction(p.gw, ref.conversation_id)
    return await p.gw.services.profiles.get(ref.user_id), ref.conversation_id


async def test_only_typed_facts_become_lines_each_with_evidence_of_its_message(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.responder = _believer
    async with platform_gateway(database_url, tmp_path, llm, **TINY_MODEL) as p:
        typed: dict[str, str] = {}  # fact -> Telegram message key
        for n in range(14):
            text = f"FACT: Ada keeps hive number {n}.{PADDING}"
            update = tg.text_update(ADA, text)
            typed[_fact(text)] = f"{ADA}:{update['message']['message_id']}"
            assert (await p.telegram(update)).status_code == 200
            forwarded = tg.text_update(
                ADA, f"FACT: Ada owes Eve {n} euros.{PADDING}", **FORWARDS[n % len(FORWARDS)]
            )
            assert (await p.telegram(forwarded)).status_code == 200
            edit = tg.edited_update(
                ADA, 90_000 + n, f"FACT: Ada is billionaire {n}.", 1_700_000_100
            )
            assert (await p.telegram(edit)).status_code == 200
            ref = await p.gw.services.core.identity("telegram", str(ADA))
            await p.gw.services.repos.messages.add_message(
                ref.conversation_id,
                NewMessage(
                    role=Role.EVENT,
                    channel="telegram",
                    text=f"FACT: Ada consents to offer {n}.",
                    source="operator via REST",
                ),
                now=p.gw.services.clock.now(),
            )
            wa_text = f"FACT: Bo plays chess opening {n}.{PADDING}"
            await p.whatsapp(wa.message_notification(BO, text=wa_text, name="Bo"))
            wa_forward = wa.message_notification(BO, text=f"FACT: Bo owes Zed {n}.{PADDING}")
            wa_forward["entry"][0]["changes"][0]["value"]["messages"][0]["context"] = {
                "forwarded": True
            }
            await p.whatsapp(wa_forward)
        await eventually(
            p.gw.services.repos.conversations.conversations_owing_reply, until=lambda c: not c
        )
        ada, ada_conversation = await _profile(p, "telegram", str(ADA))
        bo, _ = await _profile(p, "whatsapp", BO)
        chunks = {c.id: c for c in await p.gw.services.archive.chunks(ada_conversation)}
        seq_of = {
            m.platform_message_id: m.seq
            for m in await p.gw.services.repos.messages.messages_after(ada_conversation, 0, 1000)
        }
        await p.telegram(tg.text_update(ADA, "/status"))
        await eventually(
            lambda: p.messages(str(ada_conversation)),
            until=lambda ms: any("Profile facts refused" in m["text"] for m in ms),
        )

    chat = [r for r in llm.requests if request_kind(r) == "chat"]
    prompts = "\n".join(str(m["content"]) for r in chat for m in r["messages"])
    assert "[source: forwarded from Eve User on Telegram]" in prompts
    assert "[source: forwarded from Hidden Hal on Telegram]" in prompts
    assert "[source: forwarded from someone on WhatsApp]" in prompts
    for profile, kept in ((ada, "Ada keeps hive"), (bo, "Bo plays chess")):
        assert profile.lines, "no chunk gave facts; the test needs more messages"
        assert all(line.startswith(kept) for line in profile.lines), profile.lines
        assert profile.refused > 0
    for fact in ada.facts:
        (evidence,) = fact.sources
        assert evidence.seqs == (seq_of[typed[fact.text]],)
        chunk = chunks[evidence.chunk_id]
        assert chunk.level == 0
        assert chunk.seq_start <= evidence.seqs[0] <= chunk.seq_end


async def test_commands_and_their_answers_reach_no_model(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    commands = ["/profile", "/profile sources", "/status", "/forget hives", "/link"]
    answers = ["What I keep in mind", "Live conversation:", "Nothing in your profile", "link code"]
    llm.responder = _believer
    settings = make_settings(database_url, tmp_path, llm, **TINY_MODEL)
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        for n in range(16):
            await gw.send(token, f"FACT: Cy bakes bread number {n}.{PADDING}")
            reply = await gw.send(token, commands[n % len(commands)])
            assert reply.status_code == 200
        await settle_extraction(gw, uuid.UUID(conversation))
        history = [m["text"] for m in await gw.history(token)]

    assert any(a in text for a in answers for text in history)  # the commands did answer
    requests = json.dumps(llm.requests, ensure_ascii=False)
    assert {request_kind(r) for r in llm.requests} == {"chat", "summary", "extract"}
    for needle in [*commands, *answers]:
        assert needle not in requests, needle
