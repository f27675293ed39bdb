"""Profile edits: validated as a whole, applied so untouched lines stay byte-identical."""

from __future__ import annotations

import pytest

from memory.profile import Edit, EditError, Remove, Replace, Shorten, apply_edits
from memory.profile_jobs import parse_edits

LINES = [f"fact number {n}" + " detail" * n for n in range(1, 9)]


def test_edits_keep_untouched_lines_identical_and_retire_the_rest() -> None:
    edits: list[Edit] = [
        Remove((2, 7)),
        Shorten(3, "fact 3, short"),
        Replace((5, 6), "facts 5 and 6"),
    ]
    kept, retired = apply_edits(LINES, edits)

    assert kept == [LINES[0], "fact 3, short", LINES[3], "facts 5 and 6", LINES[7]]
    assert kept[0] is LINES[0]
    assert kept[2] is LINES[3]
    assert kept[4] is LINES[7]
    assert retired == [
        (LINES[1], "removed"),
        (LINES[2], "shortened"),
        (LINES[4], "replaced"),
        (LINES[5], "replaced"),
        (LINES[6], "removed"),
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
        apply_edits(LINES, [Remove((8,)), *edits])


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
