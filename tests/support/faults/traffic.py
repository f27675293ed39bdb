"""The traffic: Telegram users posting webhook updates and web chat visitors posting
messages, each person in order, each message retried until acknowledged as the platforms
retry a webhook, and a share of the Telegram updates delivered again later."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from tests.fakes.telegram_api import WEBHOOK_SECRET, text_update
from tests.support.faults.plan import FaultPlan

TELEGRAM_HEADERS = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
# What acknowledges a request to each path: anything else is retried.
ACCEPTED = {
    "/webhooks/telegram": {200},
    "/webchat/sessions": {201},
    "/webchat/messages": {200, 202},
}
WORDS = (
    *("garden", "tomato", "bicycle", "river", "lantern", "meeting", "invoice", "sister"),
    *("concert", "recipe", "harbour", "violin", "project", "deadline", "holiday", "mountain"),
    *("library", "kitchen", "window", "letter", "doctor", "train", "birthday", "coffee"),
    *("museum", "notebook", "weather", "market", "bridge", "forest"),
)


@dataclass
class Inbound:
    """One message the driver sent to the gateway, and what became of it."""

    channel: Literal["telegram", "webchat"]
    key: str  # Telegram: "chat:message_id" (the stored platform id); web chat: client_id
    label: str  # for reports: the update_id, or the client_id
    text: str
    attempts: int = 0
    acknowledged: bool = False
    redelivered: bool = False


class Progress:
    """A count others can wait for."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Condition()

    async def advance(self) -> None:
        async with self._changed:
            self.count += 1
            self._changed.notify_all()

    async def reached(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.count >= count)


class Traffic:
    def __init__(self, gateways: Sequence[httpx.AsyncClient], plan: FaultPlan) -> None:
        # As behind a load balancer: each attempt goes to the next replica.
        self._gateways = gateways
        self._plan = plan
        self.sent: list[Inbound] = []
        self.progress = Progress()  # messages done: acknowledged, or given up on
        self._holding_last = Progress()  # people holding back their last message
        self._last_round = asyncio.Event()
        self._update_ids = itertools.count(900_001)

    async def run(self) -> None:
        """Until every message is acknowledged (or given up on), redeliveries too."""
        plan = self._plan
        async with asyncio.TaskGroup() as tasks:
            for i in range(plan.telegram_users):
                tasks.create_task(self._telegram_user(5_100_001 + i, plan.rng(f"tg:{i}"), tasks))
            for i in range(plan.webchat_visitors):
                tasks.create_task(self._webchat_visitor(i, plan.rng(f"wc:{i}")))

    async def before_last_round(self) -> None:
        """Until everyone holds back their last message (for `open_last_round`)."""
        await self._holding_last.reached(self._plan.senders)

    def open_last_round(self) -> None:
        self._last_round.set()

    async def _telegram_user(
        self, user_id: int, rng: random.Random, redeliveries: asyncio.TaskGroup
    ) -> None:
        async def send(number: int) -> None:
            update_id = next(self._update_ids)
            content = self._text(f"tg{user_id}-m{number:03d}", rng)
            update = text_update(user_id, content, message_id=number, update_id=update_id)
            sent = Inbound("telegram", f"{user_id}:{number}", f"update {update_id}", content)
            await self._deliver(sent, "/webhooks/telegram", update, TELEGRAM_HEADERS, rng)
            if sent.acknowledged and rng.random() < self._plan.redelivered_share:
                sent.redelivered = True
                redeliveries.create_task(self._redeliver(update, after=rng.uniform(0, 3)))

        await self._converse(self._plan.messages_per_telegram_user, send, rng)

    async def _webchat_visitor(self, index: int, rng: random.Random) -> None:
        response, _ = await self._post("/webchat/sessions", {}, {}, rng)
        assert response is not None, "no web chat session could be opened"
        headers = {"Authorization": f"Bearer {response.json()['token']}"}

        async def send(number: int) -> None:
            client_id = f"wc{index}-{rng.getrandbits(64):016x}"
            content = self._text(f"wc{index}-m{number:03d}", rng)
            sent = Inbound("webchat", client_id, client_id, content)
            body = {"text": content, "client_id": client_id}
            await self._deliver(sent, "/webchat/messages", body, headers, rng)

        await self._converse(self._plan.messages_per_visitor, send, rng)

    async def _converse(
        self, count: int, send: Callable[[int], Awaitable[None]], rng: random.Random
    ) -> None:
        """One person's messages, one at a time, the last only when the last round opens."""
        for number in range(1, count + 1):
            if number == count:
                await self._holding_last.advance()
                await self._last_round.wait()
            await asyncio.sleep(rng.uniform(*self._plan.message_gap))  # the person types
            await send(number)
            await self.progress.advance()

    async def _deliver(
        self,
        sent: Inbound,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        rng: random.Random,
    ) -> None:
        self.sent.append(sent)
        response, sent.attempts = await self._post(path, body, headers, rng)
        sent.acknowledged = response is not None

    async def _redeliver(self, update: dict[str, Any], after: float) -> None:
        await asyncio.sleep(after)  # Telegram redelivers some time later
        rng = random.Random(update["update_id"])
        await self._post("/webhooks/telegram", update, TELEGRAM_HEADERS, rng)

    async def _post(
        self, path: str, body: dict[str, Any], headers: dict[str, str], rng: random.Random
    ) -> tuple[httpx.Response | None, int]:
        """POST until acknowledged: connection errors and other statuses are retried after
        a short backoff, for `ack_seconds`. (The response or None, attempts)."""
        deadline = asyncio.get_running_loop().time() + self._plan.ack_seconds
        first = rng.randrange(len(self._gateways))
        attempts = 0
        while True:
            http = self._gateways[(first + attempts) % len(self._gateways)]
            attempts += 1
            try:
                response = await http.post(path, json=body, headers=headers)
                if response.status_code in ACCEPTED[path]:
                    return response, attempts
            except httpx.TransportError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                return None, attempts
            await asyncio.sleep(rng.uniform(0.1, 0.4))  # the sender's retry backoff

    def _text(self, marker: str, rng: random.Random) -> str:
        words = (rng.choice(WORDS) for _ in range(self._plan.words_per_message))
        return f"{marker}: " + " ".join(words) + "."
