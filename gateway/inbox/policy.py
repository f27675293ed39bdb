"""Who may talk to the bot, per channel: `open`, `allowlist` or `pairing`.

Checked before anything of a message is stored. A refused person gets a short answer
and nothing else happens: their message is not stored and never reaches the model. On
a `pairing` channel the answer carries a code an operator approves with
`parley pairing approve CODE`; the only thing stored is that request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from gateway.clock import Clock
from gateway.envelopes import Inbound
from gateway.errors import AccessRefused
from gateway.settings import Policy, Settings
from memory.storage.pairing import Pairings

CHANNELS = ("telegram", "discord", "whatsapp", "webchat")


@dataclass(frozen=True, slots=True)
class ChannelPolicy:
    policy: Policy
    allowlist: frozenset[str]


def policies(settings: Settings) -> dict[str, ChannelPolicy]:
    return {
        channel: ChannelPolicy(
            getattr(settings, f"{channel}_policy"),
            frozenset(getattr(settings, f"{channel}_allowlist")),
        )
        for channel in CHANNELS
    }


def pairing_answer(code: str, ttl: timedelta) -> str:
    minutes = math.ceil(ttl.total_seconds() / 60)
    return (
        "Hello! This assistant is private, so I can't talk with you yet. "
        f"Your pairing code is {code}: give it to the person who runs this assistant "
        f"so they can let you in. It is valid for {minutes} minutes."
    )


def allowlist_answer(channel: str, external_id: str) -> str:
    return (
        "Sorry, this assistant is private and you are not on its list. "
        f"(Your {channel} id is {external_id}, if its operator wants to add you.)"
    )


FULL_ANSWER = (
    "Sorry, this assistant is private and is not taking new pairing requests right now. "
    "Please try again later."
)


class AccessPolicy:
    def __init__(
        self,
        *,
        pairings: Pairings,
        clock: Clock,
        channels: dict[str, ChannelPolicy],
        pairing_ttl: timedelta,
        pairing_cap: int,
    ) -> None:
        self._pairings = pairings
        self._clock = clock
        self._channels = channels
        self._ttl = pairing_ttl
        self._cap = pairing_cap

    @classmethod
    def from_settings(cls, settings: Settings, pairings: Pairings, clock: Clock) -> AccessPolicy:
        return cls(
            pairings=pairings,
            clock=clock,
            channels=policies(settings),
            pairing_ttl=timedelta(seconds=settings.pairing_code_ttl_seconds),
            pairing_cap=settings.pairing_max_pending,
        )

    async def admit(self, inbound: Inbound) -> None:
        """Return if the sender may talk; raise `AccessRefused` with their answer if not."""
        # A channel nobody configured is held to the strictest rule.
        rule = self._channels.get(inbound.channel, ChannelPolicy(Policy.PAIRING, frozenset()))
        sender = inbound.external_user_id
        if rule.policy is Policy.OPEN:
            return
        if rule.policy is Policy.ALLOWLIST:
            if sender in rule.allowlist:
                return
            raise AccessRefused(allowlist_answer(inbound.channel, sender))
        if sender in rule.allowlist or await self._pairings.is_approved(inbound.channel, sender):
            return
        pairing = await self._pairings.request_pairing(
            inbound.channel,
            sender,
            inbound.display_name,
            now=self._clock.now(),
            ttl=self._ttl,
            cap=self._cap,
        )
        if pairing is None:
            raise AccessRefused(FULL_ANSWER)
        raise AccessRefused(pairing_answer(pairing.code, self._ttl))
