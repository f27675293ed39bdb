"""The reply-write benchmark with tiny numbers: on PostgreSQL (the path it measures)
both ways store every reply, each under the next seq; SQLite it refuses, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reply_write import WAYS, run


async def test_a_tiny_run_stores_every_reply_both_ways(database_url: str, tmp_path: Path) -> None:
    if database_url.startswith("sqlite"):
        with pytest.raises(SystemExit, match="PostgreSQL"):
            await run(database_url, 3, 2, tmp_path)
        return

    result = await run(database_url, 3, 2, tmp_path)

    assert result["replies_stored"] == 3 * (1 + 2) * len(WAYS)  # a warm-up block a way
    assert result["reply_seqs_consecutive"]
    assert all(len(result["ways"][name]["cpu_ms_blocks"]) == 2 for name in WAYS)
