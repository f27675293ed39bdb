"""What a run found, and the run in a few lines for the test's output."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tests.support.faults.checks import ArchiveFindings, SendFindings
from tests.support.faults.kills import Kill
from tests.support.faults.traffic import Inbound


@dataclass
class Report:
    seed: int
    seconds: dict[str, float]  # by phase
    settled: bool
    sent: list[Inbound]
    kills: list[Kill]
    lost: list[str]
    stored_twice: list[str]
    unacknowledged: list[str]
    unanswered: list[str]
    answered_twice: list[str]
    archive: ArchiveFindings
    sends: SendFindings
    unexpected_exits: list[str]
    failed_starts: list[str]
    model_calls: Counter[str]

    @property
    def uncertain_sends(self) -> Counter[str]:
        """Reply texts Telegram took just before a gateway kill, and the gateway had not
        recorded, by the number of such kills: each may send the reply once more."""
        return Counter(text for kill in self.kills for text in kill.uncertain_sends)

    @property
    def unexplained_duplicate_sends(self) -> list[str]:
        return [
            f"{text!r} sent {1 + extra}x"
            for text, extra in self.sends.duplicates.items()
            if extra > self.uncertain_sends[text]
        ]

    def problems(self) -> dict[str, list[str]]:
        """What went wrong, by kind; empty if nothing did."""
        problems = {
            "acknowledged but not stored": self.lost,
            "stored more than once": self.stored_twice,
            "never acknowledged": self.unacknowledged,
            "user messages unanswered": self.unanswered,
            "turns answered more than once": self.answered_twice,
            "chunks not ready": self.archive.not_ready,
            "chunks overlapping at one level": self.archive.overlaps,
            "roll-ups not over consecutive children": self.archive.bad_rollups,
            "ready chunks without facts extracted": self.archive.facts_missing,
            "roll-ups due but not done": self.archive.rollups_due,
            "replies never sent": self.sends.never_sent,
            "replies not recorded as sent": self.sends.not_recorded,
            # A send Telegram took just before a kill, that the gateway had not recorded,
            # goes out again; a reply may go out once more per such kill, and no other way.
            "duplicate sends no kill explains": self.unexplained_duplicate_sends,
            "processes that died unkilled": self.unexpected_exits,
            "processes that failed to start": self.failed_starts,
        }
        return {name: items for name, items in problems.items() if items}

    def kills_of(self, target: str) -> list[Kill]:
        return [k for k in self.kills if k.target.startswith(target)]

    def render(self) -> str:
        acked = sum(s.acknowledged for s in self.sent)
        retried = sum(s.attempts > 1 for s in self.sent)
        lines = [
            f"fault run, seed {self.seed}: "
            + ", ".join(f"{k} {v:.0f}s" for k, v in self.seconds.items())
            + ("" if self.settled else " (did NOT settle)"),
            f"  messages: {len(self.sent)} sent, {acked} acknowledged, {retried} retried, "
            f"{sum(s.redelivered for s in self.sent)} redelivered",
        ]
        for target in ("serve", "worker", "redis"):
            kills = self.kills_of(target)
            aimed = [k for k in kills if k.aimed]
            lines.append(
                f"  kills of {target}: {len(kills)} ({len(aimed)} aimed, "
                f"{sum(k.landed for k in aimed)} during a model call)"
            )
        in_window = [k for k in self.kills if k.uncertain_sends]
        return "\n".join(
            [
                *lines,
                "  timeline: " + " ".join(k.brief() for k in self.kills),
                f"  kills inside a send (Telegram took a part, not recorded): {len(in_window)}, "
                f"{self.uncertain_sends.total()} parts",
                f"  Telegram replies {self.sends.replies}, sends {self.sends.sends}, "
                f"duplicate sends {sum(self.sends.duplicates.values())}, "
                f"unexplained by a kill {len(self.unexplained_duplicate_sends)}",
                f"  chunks per level: {dict(sorted(self.archive.per_level.items()))}",
                f"  model calls: {dict(sorted(self.model_calls.items()))}",
                f"  unexpected exits: {len(self.unexpected_exits)}, failed starts: "
                f"{len(self.failed_starts)}",
            ]
        )
