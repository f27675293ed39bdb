"""Assembling what the model sees in a turn: the system prompt and the live window.

The system prompt is built once per turn in a fixed order — persona, clock and idle
gap, archive timeline, profile — and reused verbatim for every model call of that turn,
so provider prompt caches stay valid.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from datetime import datetime, timedelta, tzinfo

from memory.archive.reads import ChunkView
from memory.chat_turn import ChatTurn
from memory.provenance import COMMAND_SOURCE, dialogue, label
from memory.storage.messages import StoredMessage
from memory.storage.models import Role
from memory.token_count import TokenCounter, estimate_tokens, message_tokens
from memory.zones import zone

IDLE_GAP = timedelta(days=1)
# A message more than this after the one before it carries its own time.
SHOW_TIME_AFTER = timedelta(minutes=30)


# English whatever the process' locale, which strftime's %A and %B follow (and cost a
# locale lookup each).
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def _offset(moment: datetime) -> str:
    offset = moment.utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, minutes = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{minutes:02d}"


def _long_date(moment: datetime) -> str:
    return f"{_DAYS[moment.weekday()]}, {moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


def describe_duration(delta: timedelta) -> str:
    """'3 days and 4 hours', '1 day', '26 hours' is never said."""
    minutes = int(delta.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours = rest // 60
    parts = []
    if days >= 14:
        weeks, days = divmod(days, 7)
        parts.append(f"{weeks} week{'s' * (weeks != 1)}")
        if days:
            parts.append(f"{days} day{'s' * (days != 1)}")
    else:
        if days:
            parts.append(f"{days} day{'s' * (days != 1)}")
        if hours:
            parts.append(f"{hours} hour{'s' * (hours != 1)}")
    return " and ".join(parts) or "less than an hour"


def clock_context(now: datetime, timezone: str, previous_at: datetime | None) -> str:
    """The user's local date, time and zone; and, after more than a day, the gap."""
    local = now.astimezone(zone(timezone))
    lines = [
        f"Current date and time for the user: {_long_date(local)}, {local:%H:%M} "
        f"({timezone}, {_offset(local)})."
    ]
    if previous_at is not None and now - previous_at > IDLE_GAP:
        before = previous_at.astimezone(zone(timezone))
        lines.append(
            f"It has been {describe_duration(now - previous_at)} since the previous message "
            f"in this conversation ({_long_date(before)}, {before:%H:%M})."
        )
    return "\n".join(lines)


def system_prompt(persona: str, clock: str, timeline: str = "", profile: str = "") -> str:
    sections = [persona.strip(), "# Now\n" + clock]
    if timeline:
        sections.append("# Earlier in this conversation (archive)\n" + timeline)
    if profile:
        sections.append("# What you know about the user\n" + profile)
    return "\n\n".join(sections) + "\n"


def render_timeline(rows: Sequence[ChunkView], timezone: str, budget: int) -> str:
    """Timeline rows, oldest first: date range, then summary. If the rows ever exceed
    `budget` tokens (only when roll-ups are stuck), the oldest are left out, and the
    text says so rather than silently dropping them."""
    tz = zone(timezone)
    lines = []
    for row in rows:
        start = row.time_start.astimezone(tz).date()
        end = row.time_end.astimezone(tz).date()
        span = f"{start}" if start == end else f"{start} – {end}"
        lines.append(
            f"## {span} (archive #{row.id}, level {row.level})\n{(row.summary or '').strip()}"
        )
    sizes = [estimate_tokens(line) for line in lines]
    skipped = 0
    while lines and sum(sizes) > budget:
        lines.pop(0)
        sizes.pop(0)
        skipped += 1
    if skipped:
        lines.insert(0, f"({skipped} older archive rows left out for space.)")
    return "\n\n".join(lines)


def render_live(
    messages: Sequence[StoredMessage], timezone: str, *, group: bool = False
) -> list[ChatTurn]:
    """The live window as chat turns: typed text verbatim (escaped), everything else
    behind a source line, and the time where a pause makes it worth knowing."""
    turns, _ = _render(dialogue(messages), zone(timezone), group, None)
    return turns


def _render(
    messages: Sequence[StoredMessage], tz: tzinfo, group: bool, previous: datetime | None
) -> tuple[list[ChatTurn], datetime | None]:
    """Dialogue messages as turns, after one sent at `previous` (None: they open the
    window); and when the last of them was sent."""
    turns: list[ChatTurn] = []
    for message in messages:
        sent = message.sent_at
        show_time = previous is None or sent - previous > SHOW_TIME_AFTER
        previous = sent
        if message.role is Role.ASSISTANT:
            turns.append(ChatTurn("assistant", message.text))
            continue
        time = f"{sent.astimezone(tz):%Y-%m-%d %H:%M}" if show_time else None
        speaker = message.author_name if group else None
        content = label(message.text, source=message.source, speaker=speaker, time=time)
        if message.media:  # the gateway's lines, after what the person typed
            content = f"{content}\n{message.media}" if message.text else message.media
        turns.append(ChatTurn("user", content))
    return turns, previous


class LiveRendering:
    """A conversation's live turns kept between its turns, with each one's tokens:
    `render_live` and `fit_to_budget`, but only the messages new since the last call
    are rendered and counted."""

    def __init__(self, timezone: str, group: bool) -> None:
        self.timezone = timezone
        self.group = group
        self._source: tuple[StoredMessage, ...] = ()
        self._turns: list[ChatTurn] = []
        # The message behind each turn, where it has files (None where it has none).
        self._media: list[int | None] = []
        # Tokens of the turns before each index (`_before[i]`: of turns[:i]).
        self._before = [0]
        self._previous: datetime | None = None

    def update(self, live: tuple[StoredMessage, ...]) -> None:
        """Render `live`: only its messages after those rendered last, if it starts
        with them and nothing new leaves one of those out of the dialogue (a command's
        answer leaves out its command); else all of it again."""
        kept = len(self._source)
        tail = live[kept:]
        commands = [m.reply_to_seq for m in tail if m.source == COMMAND_SOURCE]
        last = self._source[-1].seq if kept else None
        outdated = last is not None and any(s is not None and s <= last for s in commands)
        if outdated or live[:kept] != self._source:
            self._source, self._turns, self._before, self._previous = (), [], [0], None
            self._media = []
            tail = live
        said = dialogue(tail)
        turns, self._previous = _render(said, zone(self.timezone), self.group, self._previous)
        for turn in turns:
            self._before.append(self._before[-1] + message_tokens(turn.content))
        self._turns += turns
        self._media += [message.id if message.media else None for message in said]
        self._source = live

    def fit(self, budget: int) -> tuple[list[ChatTurn], int]:
        """`fit_to_budget(render_live(live), budget)` of the last `update`, and how
        many tokens those turns are."""
        count = len(self._turns)
        if not count:
            return [], 0
        total = self._before[-1]
        # The oldest turns go while the rest outgrow the budget; the newest stays.
        start = min(bisect_left(self._before, total - budget), count - 1)
        while start < count - 1 and self._turns[start].role == "assistant":
            start += 1  # chat APIs expect the dialogue to open with the user
        return self._turns[start:], total - self._before[start]

    def with_media(self, count: int) -> list[tuple[int, int]]:
        """Of the newest `count` turns, those whose message has files, newest first:
        (the turn's index among those `count`, the message's id)."""
        start = len(self._turns) - count
        return [
            (index - start, message_id)
            for index in range(len(self._turns) - 1, start - 1, -1)
            if (message_id := self._media[index]) is not None
        ]


def fit_to_budget(
    turns: list[ChatTurn], budget: int, count: TokenCounter = estimate_tokens
) -> list[ChatTurn]:
    """Drop the oldest turns until the rest fit `budget` tokens. The newest is kept."""
    sizes = [message_tokens(turn.content, count) for turn in turns]
    total = sum(sizes)
    start = 0
    while total > budget and start < len(turns) - 1:
        total -= sizes[start]
        start += 1
    kept = turns[start:]
    # Chat APIs expect the dialogue to open with the user.
    while len(kept) > 1 and kept[0].role == "assistant":
        kept = kept[1:]
    return kept
