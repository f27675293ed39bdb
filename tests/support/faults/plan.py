"""How much traffic, and how many kills of what, when: all drawn from one seed."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class FaultPlan:
    """Kills are placed by the traffic's progress (a fraction of the messages acknowledged),
    so the plan holds however fast the machine is. Gateway kills stop at 85%. The last
    Redis outage comes between everyone's last two messages, once the turns before are
    done and their chunks summarised: the last turns then swap chunks in and queue work
    with Redis down, and no later message or restart answers a turn dropped then — only
    the code under test can. A few worker kills follow it (no later Redis restart
    clears the keys they leave behind)."""

    seed: int = 9
    telegram_users: int = 5
    messages_per_telegram_user: int = 30
    webchat_visitors: int = 3
    messages_per_visitor: int = 14
    redelivered_share: float = 0.2
    words_per_message: int = 55
    message_gap: tuple[float, float] = (0.1, 0.8)
    workers: int = 2
    replicas: int = 1  # `parley serve` processes behind the traffic's "load balancer"
    serve_kills: int = 22  # of all replicas together, the same number each
    serve_window: tuple[float, float] = (0.03, 0.85)
    worker_kills: int = 8  # during the traffic
    worker_window: tuple[float, float] = (0.05, 0.85)
    late_worker_kills: int = 4  # after the last Redis outage, aimed at fact extraction
    late_worker_gap: tuple[float, float] = (0.3, 1.0)
    redis_windows: tuple[tuple[float, float], ...] = ((0.15, 0.35), (0.45, 0.65))  # +1 last
    redis_down: tuple[float, float] = (3.0, 5.0)
    aimed_share: float = 0.5  # of the kills in the traffic, aimed at a model call in flight
    kill_delay: tuple[float, float] = (0.0, 0.5)  # after a kill's moment comes
    trap_seconds: float = 4.0  # how long an aimed kill waits for a model call
    ack_seconds: float = 120.0  # how long one message is retried before it counts as refused
    # The traffic-and-kills phase, at most: a bound for a run that hangs, not a figure
    # (the kills follow the traffic's progress). It passed 200 s on a slow 2-core host,
    # where 22 restarts of `parley serve` take much of it.
    drive_seconds: float = 400.0

    @property
    def messages(self) -> int:
        return (
            self.telegram_users * self.messages_per_telegram_user
            + self.webchat_visitors * self.messages_per_visitor
        )

    @property
    def senders(self) -> int:
        return self.telegram_users + self.webchat_visitors

    def rng(self, name: str) -> random.Random:
        """A generator of its own for each part of the run, so that one part drawing more
        (a retry) does not shift what the others draw."""
        return random.Random(f"{self.seed}:{name}")

    def moments(self, rng: random.Random, count: int, window: tuple[float, float]) -> list[int]:
        """`count` points of progress (messages done) spread over `window`, one at random
        in each of `count` equal parts; all before the last round (which waits for the
        last Redis outage)."""
        low, high = window
        step = (high - low) / count
        last_round = self.messages - self.senders
        return [
            min(last_round, round((low + step * (i + rng.random())) * self.messages))
            for i in range(count)
        ]

    def aims(self, rng: random.Random, count: int) -> list[bool]:
        """Which of `count` kills wait for a model call in flight: `aimed_share` of them."""
        aimed = round(count * self.aimed_share)
        plan = [True] * aimed + [False] * (count - aimed)
        rng.shuffle(plan)
        return plan
