"""When a reminder is due: wall-clock times in a person's zone, their repeats, and the
instants they fall on.

A schedule keeps wall-clock times (`YYYY-MM-DDTHH:MM:SS`, no offset) and turns one into
an instant only when it needs one, in the person's zone of the moment: a person who moves
keeps "9:00" at 9:00 where they are now. A wall-clock time the zone skips (spring
forward) falls on the first minute after the gap; one it has twice (fall back), on the
first of the two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from dateutil.relativedelta import relativedelta
from dateutil.rrule import rrule, rrulestr

from gateway.errors import InputError

LOCAL = "%Y-%m-%dT%H:%M:%S"
# Repeats a person may ask for: none more often than every minute.
FREQUENCIES = ("MINUTELY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY")
# ISO 8601 durations: P1D, PT20M, P1W, P1Y2M3DT4H5M6S.
_DURATION = re.compile(
    r"^P(?!$)(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)S)?)?$"
)
_LOCAL_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")
# How far ahead a reminder may be set, and how many missed due times are counted.
MAX_AHEAD = timedelta(days=366 * 10)
MAX_COUNTED = 1000
_LEAP_YEAR_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# Repeats that step by a fixed span: their due times a whole number of steps after the
# start are the same from any such start, whatever the BY parts filter out.
_STEPS = {
    "MINUTELY": timedelta(minutes=1),
    "HOURLY": timedelta(hours=1),
    "DAILY": timedelta(days=1),
    "WEEKLY": timedelta(weeks=1),
}


class BadWhen(InputError):
    """A `when` that names no time, or one in the past."""


class BadRepeat(InputError):
    """A repeat that is no RRULE this gateway runs."""


def parse_local(text: str) -> datetime:
    """A stored wall-clock time."""
    return datetime.strptime(text, LOCAL)


def format_local(wall: datetime) -> str:
    return wall.strftime(LOCAL)


def resolve_when(when: str, now: datetime, zone: ZoneInfo) -> datetime:
    """The wall-clock time `when` names in `zone`: a local `YYYY-MM-DDTHH:MM`, or an
    ISO 8601 duration from `now` (days and longer keep the wall-clock time; hours and
    shorter are elapsed time). `BadWhen` if it names none, or one not after `now`."""
    text = when.strip()
    duration = _DURATION.match(text.upper())
    try:
        wall = _after(duration, now, zone) if duration is not None else _local(text)
        due = instant(wall, zone)
    except OverflowError:  # a duration of a million years, a date near year 9999
        raise BadWhen("that is more than ten years ahead") from None
    if due <= now:
        which = "is now, not later" if due == now else "is in the past"
        raise BadWhen(f"{describe(wall, zone)} {which}; it is now {describe_now(now, zone)}")
    if due - now > MAX_AHEAD:
        raise BadWhen("that is more than ten years ahead")
    return wall


def _after(duration: re.Match[str], now: datetime, zone: ZoneInfo) -> datetime:
    parts = {name: int(value) for name, value in duration.groupdict().items() if value}
    calendar = relativedelta(
        years=parts.get("years", 0),
        months=parts.get("months", 0),
        weeks=parts.get("weeks", 0),
        days=parts.get("days", 0),
    )
    elapsed = timedelta(
        hours=parts.get("hours", 0),
        minutes=parts.get("minutes", 0),
        seconds=parts.get("seconds", 0),
    )
    if elapsed > MAX_AHEAD or parts.get("years", 0) > 10 or parts.get("months", 0) > 120:
        raise BadWhen("that is more than ten years ahead")
    wall = wall_clock(now, zone) + calendar
    return wall_clock(instant(wall, zone) + elapsed, zone).replace(microsecond=0)


def _local(text: str) -> datetime:
    for layout in _LOCAL_FORMATS:
        try:
            return datetime.strptime(text, layout)
        except ValueError:
            continue
    raise BadWhen(
        f"{text[:40]!r} is not a time: give a local time in the person's zone, "
        "YYYY-MM-DDTHH:MM (no offset), or a duration from now such as PT20M or P1D"
    )


def wall_clock(moment: datetime, zone: ZoneInfo) -> datetime:
    """The wall-clock time (no zone attached) at `moment` in `zone`."""
    return moment.astimezone(zone).replace(tzinfo=None)


def instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """When the wall-clock time `wall` happens in `zone`, in UTC: the first of two for an
    ambiguous time, the first minute after the gap for a skipped one."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if wall_clock(first, zone) == wall:
        return first
    # Skipped: the gap ends (at a whole second) between the two readings of `wall`, one
    # per offset; the first second whose wall-clock time is past `wall` is found by halves.
    low = int(wall.replace(tzinfo=zone, fold=1).astimezone(UTC).timestamp())
    high = int(first.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if wall_clock(datetime.fromtimestamp(middle, UTC), zone) >= wall:
            high = middle
        else:
            low = middle
    end = datetime.fromtimestamp(high, UTC)
    return end if end.second == 0 else end.replace(second=0) + timedelta(minutes=1)


def read_repeat(repeat: str, start: datetime, near: datetime | None = None) -> rrule:
    """The RRULE `repeat` from the wall-clock time `start`; `BadRepeat` if it is none.

    With `near`, a rule whose due times from `near` on are those of the repeat: one that
    steps by a fixed span and has no COUNT starts at its last whole step before `near`,
    since walking to a due time walks every one from the start (a month of a minutely
    repeat, 43,200 of them, took 100 ms a firing)."""
    text = repeat.strip()
    text = text[6:] if text.upper().startswith("RRULE:") else text
    parts = dict(part.partition("=")[::2] for part in text.upper().split(";") if part)
    if parts.get("FREQ") not in FREQUENCIES:
        raise BadRepeat(
            f"a repeat is an RRULE with FREQ one of {', '.join(FREQUENCIES)} "
            "(e.g. FREQ=WEEKLY;BYDAY=MO)"
        )
    if "UNTIL" in parts and parts["UNTIL"].endswith("Z"):
        raise BadRepeat("UNTIL is a local time, without Z (e.g. UNTIL=20270101T000000)")
    try:
        rule = rrulestr(text, dtstart=start)
    except (ValueError, TypeError) as exc:
        raise BadRepeat(f"{text[:80]!r} is not an RRULE this gateway reads: {exc}") from None
    if not isinstance(rule, rrule):
        raise BadRepeat("one RRULE, without RDATE or EXRULE")
    interval = parts.get("INTERVAL", "1")
    if not interval.isdigit() or int(interval) < 1:
        # dateutil takes INTERVAL=0, and then walks its first due time forever.
        raise BadRepeat("INTERVAL is a whole number, 1 or more")
    _check_days(parts)
    step = _STEPS.get(parts["FREQ"])
    if near is not None and near > start and step is not None and "COUNT" not in parts:
        step *= int(interval)
        rule = rule.replace(dtstart=start + (near - start) // step * step)
    return rule


def _check_days(parts: dict[str, str]) -> None:
    """`BadRepeat` unless some month of BYMONTH has some day of BYMONTHDAY (30 February:
    none). dateutil takes such a rule, and asked for its first due time walks to the year
    9999 before it says there is none: seconds of CPU for a minutely one."""
    months = [int(month) for month in parts.get("BYMONTH", "").split(",") if month]
    if not all(1 <= month <= 12 for month in months):
        raise BadRepeat("BYMONTH is a month, 1 to 12")
    days = [int(day) for day in parts.get("BYMONTHDAY", "").split(",") if day]
    longest = max((_LEAP_YEAR_DAYS[month - 1] for month in months), default=31)
    if days and not any(1 <= abs(day) <= longest for day in days):
        raise BadRepeat("no month it names has that day of the month")


def first_wall(rule: rrule | None, start: datetime) -> datetime | None:
    """The first wall-clock time of a schedule starting at `start`."""
    if rule is None:
        return start
    return rule.after(start, inc=True)


@dataclass(frozen=True, slots=True)
class Catch:
    """Where a repeat stands at `now`: the due times that passed (the first, counted up
    to MAX_COUNTED) and its next one after `now`, if any."""

    passed: int
    following: datetime | None


def catch_up(rule: rrule | None, wall: datetime, now: datetime, zone: ZoneInfo) -> Catch:
    """From a due wall-clock time `wall` (passed): how many passed by `now` and the next
    wall-clock time after `now` (none for a one-off, or a repeat that has ended)."""
    if rule is None:
        return Catch(1, None)
    # One walk through the due times: each `rule.after` walks them from the rule's
    # start again, which made a week of a minutely repeat a minute of CPU.
    due = rule.xafter(wall)
    passed = 1
    following = next(due, None)
    while following is not None and instant(following, zone) <= now and passed < MAX_COUNTED:
        passed += 1
        following = next(due, None)
    if following is not None and instant(following, zone) <= now:
        # Counted enough: skip ahead to a little before now, then walk.
        due = rule.xafter(wall_clock(now, zone) - timedelta(days=1))
        following = next(due, None)
        while following is not None and instant(following, zone) <= now:
            following = next(due, None)
    return Catch(passed, following)


def describe(wall: datetime, zone: ZoneInfo) -> str:
    """A wall-clock time as a person reads it: `Thu 3 Dec 2026, 09:00 (Europe/Berlin)`;
    one the zone skips names the time it falls on."""
    shown = wall_clock(instant(wall, zone), zone)
    # Seconds only where there are some (a duration from now): the time it fires.
    clock = f"{shown:%H:%M}" if shown.second == 0 else f"{shown:%H:%M:%S}"
    return f"{shown:%a} {shown.day} {shown:%b %Y}, {clock} ({zone.key})"


def describe_now(now: datetime, zone: ZoneInfo) -> str:
    return describe(wall_clock(now, zone).replace(second=0, microsecond=0), zone)


def describe_repeat(repeat: str | None) -> str:
    return "once" if repeat is None else f"repeats {repeat}"


@dataclass(frozen=True, slots=True)
class QuietHours:
    """When follow-ups wait, as wall-clock times of each person's day (may wrap
    midnight: 22:00-08:00)."""

    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> QuietHours | None:
        if not text:
            return None
        start, _, end = text.partition("-")
        return cls(time.fromisoformat(start), time.fromisoformat(end))

    def ends(self, wall: datetime) -> datetime | None:
        """The wall-clock time the quiet hours around `wall` end; None outside them."""
        now = wall.time()
        if self.start <= self.end:
            inside = self.start <= now < self.end
        else:
            inside = now >= self.start or now < self.end
        if not inside:
            return None
        end = datetime.combine(wall.date(), self.end)
        return end if end > wall else end + timedelta(days=1)
