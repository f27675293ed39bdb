"""Access policy per channel: pairing codes approved from the CLI, allowlists, caps and
expiry. A refused sender never reaches the model and leaves nothing but a request."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gateway.inbox.policy import AccessPolicy, ChannelPolicy
from gateway.settings import Policy
from memory.storage.engine import create_engine, session_factory
from memory.storage.pairing import Approval, Pairings
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.clock import ManualClock
from tests.support.platforms import platform_gateway
from tests.support.process import parley_env, run_parley

STRANGER = 4242
CODE = re.compile(r"pairing code is ([A-Z0-9]{8})")


def _code(text: str) -> str:
    match = CODE.search(text)
    assert match, text
    return match.group(1)


async def test_an_unapproved_sender_gets_a_code_and_never_reaches_the_model(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    env = parley_env(data_dir=str(tmp_path), database_url=database_url)
    async with platform_gateway(database_url, tmp_path, llm, telegram_policy="pairing") as p:
        await p.telegram(tg.text_update(STRANGER, "hello, who are you?", first_name="Eve"))
        await p.telegram(tg.text_update(STRANGER, "please answer"))
        await p.tg.wait_until(lambda f: len(f.texts(STRANGER)) == 2)
        first, second = p.tg.texts(STRANGER)
        assert await p.sessions() == []
        assert llm.requests == []

        listed = await asyncio.to_thread(run_parley, "pairing", "list", env=env, cwd=tmp_path)
        wrong = await asyncio.to_thread(
            run_parley, "pairing", "approve", "NOPE2345", env=env, cwd=tmp_path
        )
        approved = await asyncio.to_thread(
            run_parley, "pairing", "approve", _code(first).lower(), env=env, cwd=tmp_path
        )

        await p.telegram(tg.text_update(STRANGER, "now may I?"))
        await p.tg.wait_until(lambda f: len(f.texts(STRANGER)) == 3)

    assert _code(first) == _code(second)  # one live code per person
    assert listed.returncode == 0, listed.stderr
    assert _code(first) in listed.stdout
    assert f"telegram {STRANGER} (Eve User)" in listed.stdout
    assert wrong.returncode == 2
    assert "no pairing request" in wrong.stderr
    assert approved.returncode == 0, approved.stderr
    assert f"approved telegram {STRANGER}" in approved.stdout
    assert len(llm.requests) == 1
    assert "now may I?" in str(llm.requests[0]["messages"][-1])
    assert "hello, who are you?" not in str(llm.requests[0])


async def test_an_allowlist_lets_listed_ids_in_and_refuses_the_rest(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(
        database_url,
        tmp_path,
        llm,
        whatsapp_policy="allowlist",
        whatsapp_allowlist="15550001111, 15550002222",
    ) as p:
        await p.whatsapp(wa.message_notification("15559999999", text="let me in"))
        await p.wa.wait_until(lambda f: len(f.texts("15559999999")) == 1)
        assert await p.sessions() == []
        await p.whatsapp(wa.message_notification("15550002222", text="hi, it's me"))
        await p.wa.wait_until(lambda f: len(f.texts("15550002222")) == 1)
        sessions = await p.sessions()

    (refusal,) = p.wa.texts("15559999999")
    assert "private" in refusal
    assert "15559999999" in refusal
    assert len(llm.requests) == 1
    assert "let me in" not in str(llm.requests)
    assert len(sessions) == 1


async def test_web_chat_stays_open_while_other_channels_pair(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(
        database_url, tmp_path, llm, telegram_policy="pairing", whatsapp_policy="pairing"
    ) as p:
        token, _ = await p.gw.visitor()
        response = await p.gw.send(token, "hello from the browser")

    assert response.status_code == 200
    assert response.json()["reply"]["text"] == "reply 1"


async def test_a_refused_group_member_is_not_let_in_through_the_group(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    group = tg.group_chat()
    async with platform_gateway(database_url, tmp_path, llm, telegram_policy="pairing") as p:
        mention = tg.mention_update(STRANGER, f"hey @{tg.BOT_USERNAME}", group)
        assert (await p.telegram(mention)).status_code == 200
        await p.tg.wait_until(lambda f: len(f.texts(group["id"])) == 1)
        assert await p.sessions() == []

    assert "pairing code" in p.tg.texts(group["id"])[0]
    assert llm.requests == []


async def test_codes_expire_are_capped_per_channel_and_renew(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        pairings = Pairings(session_factory(engine))
        clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
        policy = AccessPolicy(
            pairings=pairings,
            clock=clock,
            channels={"telegram": ChannelPolicy(Policy.PAIRING, frozenset())},
            pairing_ttl=timedelta(minutes=30),
            pairing_cap=2,
        )
        answers = [await _refusal(policy, f"{n}") for n in (1, 2, 3)]
        other_channel = await pairings.request_pairing(
            "whatsapp", "1", "", now=clock.now(), ttl=timedelta(minutes=30), cap=2
        )
        clock.advance(timedelta(minutes=31))
        expired = await pairings.approve_pairing(_code(answers[0]), now=clock.now())
        renewed = await _refusal(policy, "1")
        approved = await pairings.approve_pairing(_code(renewed), now=clock.now())
        again = await pairings.approve_pairing(_code(renewed), now=clock.now())
        let_in = await _refusal(policy, "1")
    finally:
        await engine.dispose()

    assert "pairing code" in answers[0]
    assert "pairing code" in answers[1]
    assert "not taking new pairing requests" in answers[2]  # the cap of 2 per channel
    assert other_channel is not None  # caps are per channel
    assert expired[0] is Approval.EXPIRED
    assert _code(renewed) != _code(answers[0])
    assert approved[0] is Approval.APPROVED
    assert again[0] is Approval.ALREADY_APPROVED
    assert let_in == ""


async def _refusal(policy: AccessPolicy, sender: str) -> str:
    from gateway.envelopes import Inbound
    from gateway.errors import AccessRefused

    try:
        await policy.admit(Inbound(channel="telegram", external_user_id=sender, text="hi"))
    except AccessRefused as refused:
        return refused.answer
    return ""
