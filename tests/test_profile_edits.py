"""Profile edits: validated as a whole, applied so untouched lines stay byte-identical."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.profile.facts import (
    Edit,
    EditError,
    Evidence,
    Fact,
    Remove,
    Replace,
    Shorten,
    apply_edits,
)
from memory.profile.tidy import parse_edits

LINES = [f"fact number {n}" + " detail" * n for n in range(1, 9)]
WHEN = datetime(2026, 11, 1, tzinfo=UTC)
# Line n came from message 10·n of chunk n; line 8 is older than evidence (unknown).
FACTS = [Fact(line, (Evidence(n, (10 * n,), WHEN),)) for n, line in enumerate(LINES[:7], 1)]
FACTS.append(Fact(LINES[7]))


def test_edits_keep_untouched_lines_identical_with_their_evidence_and_retire_the_rest() -> None:
    edits: list[Edit] = [
        Remove((2, 7)),
        Shorten(3, "fact 3, short"),
        Replace((5, 6), "facts 5 and 6"),
    ]
    kept, retired = apply_edits(FACTS, edits, shrink=True)

    assert [fact.text for fact in kept] == [
        LINES[0],
        "fact 3, short",
        LINES[3],
        "facts 5 and 6",
        LINES[7],
    ]
    assert kept[0] is FACTS[0]
    assert kept[2] is FACTS[3]
    assert kept[4] is FACTS[7]
    assert kept[1].sources == FACTS[2].sources  # shortened: the same evidence
    assert kept[3].sources == FACTS[4].sources + FACTS[5].sources  # merged: the union
    assert retired == [
        (FACTS[1], "removed"),
        (FACTS[2], "shortened"),
        (FACTS[4], "replaced"),
        (FACTS[5], "replaced"),
        (FACTS[6], "removed"),
    ]


@pytest.mark.parametrize(
    ("edits", "reason"),
    [
        ([Remove((0,))], "does not exist"),
        ([Remove((9,))], "does not exist"),
        ([Remove((1,)), Shorten(1, "x")], "edited twice"),
        ([Replace((2, 3), "a"), Remove((3,))], "edited twice"),
        ([Shorten(2, LINES[1] + " and more")], "not shorter"),
        ([Shorten(2, "two\nlines")], "one non-empty line"),
        ([Shorten(2, "   ")], "one non-empty line"),
        ([Replace((), "nothing")], "names no lines"),
        ([Replace((1, 2), LINES[0] + LINES[1] + "!")], "not shorter"),
    ],
)
def test_an_invalid_edit_rejects_the_whole_answer(edits: list[Edit], reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        apply_edits(FACTS, [Remove((8,)), *edits], shrink=True)


@pytest.mark.parametrize(
    "answer",
    [
        "remove line 3",
        "[]",
        '{"edits": {"remove": [1]}}',
        '{"edits": [{"remove": [1], "extra": true}]}',
        '{"edits": [{"remove": ["1"]}]}',
        '{"edits": [{"remove": [true]}]}',
        '{"edits": [{"shorten": 1}]}',
        '{"edits": [{"replace": [1, 2], "with": 5}]}',
        '{"edits": [{"drop": [1]}]}',
    ],
)
def test_malformed_edit_answers_are_refused(answer: str) -> None:
    with pytest.raises(EditError):
        parse_edits(answer)


def test_edit_answers_in_a_code_fence_are_read() -> None:
    answer = '```json\n{"edits": [{"remove": [1, 2]}, {"shorten": 3, "to": "x"}]}\n```'
    assert parse_edits(answer) == [Remove((1, 2)), Shorten(3, "x")]


def test_a_correction_may_be_longer_but_a_shortened_line_may_not() -> None:
    longer = LINES[1] + ", corrected at length"
    kept, retired = apply_edits(FACTS, [Replace((2,), longer)], shrink=False)

    assert [fact.text for fact in kept] == [LINES[0], longer, *LINES[2:]]
    assert kept[1].sources == FACTS[1].sources
    assert retired == [(FACTS[1], "replaced")]
    with pytest.raises(EditError, match="replace the line"):
        apply_edits(FACTS, [Shorten(2, longer)], shrink=False)
