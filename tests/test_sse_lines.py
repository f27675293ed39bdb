"""The lines of a model's event stream, however the network cuts its bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest

from gateway.llm.http import sse_lines

STREAM = 'data: {"a": "héllo ✓"}\r\n\r\nevent: ping\rdata: x\n\ndata: last'.encode()
LINES = ['data: {"a": "héllo ✓"}', "", "event: ping", "data: x", "", "data: last"]


async def _chunks(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _lines(parts: Iterable[bytes]) -> list[str]:
    return [line async for line in sse_lines(_chunks(parts))]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
async def test_lines_are_the_same_wherever_the_bytes_are_cut(size: int) -> None:
    # Size 1 cuts every CRLF in two and every multi-byte character in pieces.
    parts = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert await _lines(parts) == LINES


async def test_a_cr_cut_from_its_lf_is_one_line_end() -> None:
    assert await _lines([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [
        "data: a",
        "data: b",
        "",
    ]


async def test_a_stream_ending_in_a_cr_ends_its_last_line() -> None:
    assert await _lines([b"data: a\r"]) == ["data: a"]


async def test_bytes_that_are_not_utf8_are_replaced_not_fatal() -> None:
    assert await _lines([b"data: \xff\xfe ok\n"]) == ["data: \ufffd\ufffd ok"]
