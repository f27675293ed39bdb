"""Wall-clock times in a person's zone (DESIGN §9): durations, local times, repeats, and
the instants they fall on across daylight-saving changes, read with a fixed `now`."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from gateway.reminders.times import (
    BadRepeat,
    BadWhen,
    QuietHours,
    catch_up,
    describe,
    first_wall,
    instant,
    read_repeat,
    resolve_when,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def test_a_time_the_zone_skips_falls_on_the_first_minute_after_the_gap() -> None:
    # 28 March 2027: Berlin goes from 02:00 CET straight to 03:00 CEST.
    assert instant(datetime(2027, 3, 28, 2, 30), BERLIN) == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert instant(datetime(2027, 3, 28, 2, 0), BERLIN) == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert (
        describe(datetime(2027, 3, 28, 2, 30), BERLIN) == "Sun 28 Mar 2027, 03:00 (Europe/Berlin)"
    )
    # 14 March 2027: New York skips 02:00-03:00.
    assert instant(datetime(2027, 3, 14, 2, 59), NEW_YORK) == datetime(
        2027, 3, 14, 7, 0, tzinfo=UTC
    )
    # Either side of the gap is untouched.
    assert instant(datetime(2027, 3, 28, 1, 59), BERLIN) == datetime(2027, 3, 28, 0, 59, tzinfo=UTC)
    assert instant(datetime(2027, 3, 28, 3, 0), BERLIN) == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)


def test_a_time_the_zone_has_twice_falls_on_the_first() -> None:
    # 31 October 2027: Berlin has 02:30 in CEST (00:30 UTC), then again in CET (01:30 UTC).
    assert instant(datetime(2027, 10, 31, 2, 30), BERLIN) == datetime(
        2027, 10, 31, 0, 30, tzinfo=UTC
    )
    # 7 November 2027: New York has 01:30 in EDT, then in EST.
    assert instant(datetime(2027, 11, 7, 1, 30), NEW_YORK) == datetime(
        2027, 11, 7, 5, 30, tzinfo=UTC
    )


def test_a_daily_repeat_fires_once_a_day_across_both_changes() -> None:
    start = datetime(2027, 3, 27, 2, 30)
    rule = read_repeat("FREQ=DAILY;COUNT=3", start)
    walls = list(rule)
    assert [instant(w, BERLIN) for w in walls] == [
        datetime(2027, 3, 27, 1, 30, tzinfo=UTC),  # CET
        datetime(2027, 3, 28, 1, 0, tzinfo=UTC),  # skipped: 03:00 CEST
        datetime(2027, 3, 29, 0, 30, tzinfo=UTC),  # CEST
    ]
    autumn = list(read_repeat("FREQ=DAILY;COUNT=3", datetime(2027, 10, 30, 2, 30)))
    instants = [instant(w, BERLIN) for w in autumn]
    assert len(set(instants)) == 3  # the doubled hour fires once
    assert instants[1] == datetime(2027, 10, 31, 0, 30, tzinfo=UTC)


def test_durations_keep_the_wall_clock_for_days_and_count_elapsed_time_for_hours() -> None:
    # Noon UTC on the day before Berlin springs forward (13:00 CET).
    now = datetime(2027, 3, 27, 12, 0, tzinfo=UTC)
    assert resolve_when("P1D", now, BERLIN) == datetime(2027, 3, 28, 13, 0)  # 13:00 CEST
    assert resolve_when("PT24H", now, BERLIN) == datetime(2027, 3, 28, 14, 0)  # 24 h later
    assert resolve_when("PT20M", now, BERLIN) == datetime(2027, 3, 27, 13, 20)
    assert resolve_when("2027-03-28T09:00", now, BERLIN) == datetime(2027, 3, 28, 9, 0)
    assert resolve_when(" 2027-03-28 09:00 ", now, BERLIN) == datetime(2027, 3, 28, 9, 0)


@pytest.mark.parametrize(
    ("when", "words"),
    [
        ("2027-03-27T12:59", "is in the past; it is now Sat 27 Mar 2027, 13:00"),
        ("2027-03-27T13:00", "is now, not later"),
        ("tomorrow at 9", "is not a time"),
        ("2027-03-28T09:00+01:00", "(no offset)"),
        ("P", "is not a time"),
        ("PT", "is not a time"),
        ("P20Y", "more than ten years"),
    ],
)
def test_a_when_that_names_no_future_time_is_refused_in_words(when: str, words: str) -> None:
    now = datetime(2027, 3, 27, 12, 0, tzinfo=UTC)
    with pytest.raises(BadWhen, match=words.replace("(", r"\(").replace(")", r"\)")):
        resolve_when(when, now, BERLIN)


@pytest.mark.parametrize(
    ("repeat", "words"),
    [
        ("FREQ=SECONDLY", "FREQ one of"),
        ("every monday", "FREQ one of"),
        ("FREQ=WEEKLY;BYDAY=XX", "not an RRULE"),
        ("FREQ=DAILY;UNTIL=20280101T000000Z", "without Z"),
        ("FREQ=DAILY;INTERVAL=x", "not an RRULE"),
        ("FREQ=DAILY;INTERVAL=0", "INTERVAL is a whole number"),
        ("FREQ=MINUTELY;INTERVAL=-5", "INTERVAL is a whole number"),
        ("FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=30", "no month it names"),
        ("FREQ=DAILY;BYMONTH=4,6;BYMONTHDAY=31,-31", "no month it names"),
        ("FREQ=DAILY;BYMONTHDAY=0", "no month it names"),
        ("FREQ=DAILY;BYMONTH=13;BYMONTHDAY=1", "BYMONTH is a month"),
    ],
)
def test_a_malformed_repeat_is_refused_in_words(repeat: str, words: str) -> None:
    with pytest.raises(BadRepeat, match=words):
        read_repeat(repeat, datetime(2027, 3, 1, 8, 0))


def test_a_weekly_repeat_starts_on_its_first_matching_day() -> None:
    # 1 March 2027 is a Monday; asked on Wednesday the 3rd for Mondays at 8.
    rule = read_repeat("RRULE:FREQ=WEEKLY;BYDAY=MO", datetime(2027, 3, 3, 8, 0))
    assert first_wall(rule, datetime(2027, 3, 3, 8, 0)) == datetime(2027, 3, 8, 8, 0)


def test_missed_due_times_collapse_and_the_next_is_after_now() -> None:
    rule = read_repeat("FREQ=DAILY", datetime(2027, 3, 1, 9, 0))
    now = datetime(2027, 3, 5, 12, 0, tzinfo=UTC)
    caught = catch_up(rule, datetime(2027, 3, 1, 9, 0), now, BERLIN)
    assert caught.passed == 5  # the 1st to the 5th at 09:00
    assert caught.following == datetime(2027, 3, 6, 9, 0)
    # A one-off: passed once, nothing follows.
    once = catch_up(None, datetime(2027, 3, 1, 9, 0), now, BERLIN)
    assert (once.passed, once.following) == (1, None)
    # A minutely repeat down for a week: counting stops, the next is still right.
    minutely = read_repeat("FREQ=MINUTELY", datetime(2027, 3, 1, 0, 0))
    far = catch_up(minutely, datetime(2027, 3, 1, 0, 0), now, BERLIN)
    assert far.passed == 1000
    assert far.following == datetime(2027, 3, 5, 13, 1)


def test_quiet_hours_wrap_midnight() -> None:
    quiet = QuietHours.parse("22:00-08:00")
    assert quiet is not None
    assert quiet.ends(datetime(2027, 3, 1, 23, 0)) == datetime(2027, 3, 2, 8, 0)
    assert quiet.ends(datetime(2027, 3, 2, 7, 59)) == datetime(2027, 3, 2, 8, 0)
    assert quiet.ends(datetime(2027, 3, 2, 8, 0)) is None
    assert quiet.ends(datetime(2027, 3, 2, 21, 59)) is None
    day = QuietHours.parse("12:00-14:00")
    assert day is not None
    assert day.ends(datetime(2027, 3, 2, 13, 0)) == datetime(2027, 3, 2, 14, 0)
    assert QuietHours.parse("") is None


@pytest.mark.parametrize(
    "repeat",
    [
        "FREQ=MINUTELY",
        "FREQ=MINUTELY;INTERVAL=7;BYHOUR=9,10",
        "FREQ=HOURLY;INTERVAL=5;BYDAY=MO,TH",
        "FREQ=DAILY;INTERVAL=3;BYHOUR=8,20;BYMINUTE=15",
        "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,FR;BYSETPOS=-1",
        "FREQ=WEEKLY;INTERVAL=3;WKST=SU;BYDAY=SU,SA",
        "FREQ=WEEKLY;UNTIL=20280301T000000",
        "FREQ=MONTHLY;BYMONTHDAY=31",
        "FREQ=DAILY;COUNT=400",
    ],
)
def test_a_repeat_read_near_a_due_time_has_the_same_due_times_from_there(repeat: str) -> None:
    start = datetime(2027, 1, 29, 9, 45, 30)  # a Friday, at an odd second
    whole = read_repeat(repeat, start)
    due = whole.after(datetime(2027, 11, 5, 13, 7), inc=True)
    assert due is not None
    for near in (due, due + timedelta(seconds=1), start - timedelta(days=1)):
        near_rule = read_repeat(repeat, start, near=near)
        expected = list(itertools.islice(whole.xafter(near, inc=True), 60))
        assert list(itertools.islice(near_rule.xafter(near, inc=True), 60)) == expected
        assert expected  # the rule has due times there to compare


def test_a_minutely_repeat_a_year_old_starts_its_walk_near_the_due_time() -> None:
    start = datetime(2027, 1, 1, 0, 0)
    wall = datetime(2028, 1, 1, 0, 0)
    rule = read_repeat("FREQ=MINUTELY", start, near=wall)
    # The rule's own start moved up to the due time, so nothing walks the year before it.
    assert str(rule).startswith("DTSTART:20280101T000000")
    caught = catch_up(rule, wall, datetime(2027, 12, 31, 23, 0, 30, tzinfo=UTC), BERLIN)
    assert (caught.passed, caught.following) == (1, datetime(2028, 1, 1, 0, 1))
