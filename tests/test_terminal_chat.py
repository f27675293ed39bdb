"""`parley chat` against a running gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.errors import ParleyError
from gateway.terminal import run_chat
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.harness import make_settings, running_gateway
from tests.support.process import free_port


async def _lines(*texts: str) -> AsyncIterator[str]:
    for text in texts:
        yield text


async def test_terminal_chat_streams_replies_and_keeps_its_identity(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Reply("hello from the model", pieces=4), Reply("second answer"))
    token_file = tmp_path / "chat-token"
    out: list[str] = []
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await run_chat(gw.url, token_file, _lines("hi", "   ", "again"), out.append)
        token = token_file.read_text()
        history = await gw.history(token)

    printed = "".join(out)
    assert "parley> hello from the model\n" in printed
    assert "parley> second answer\n" in printed
    assert out.count("parley> ") == 2  # streamed: prefix, then the pieces
    assert [m["text"] for m in history if m["role"] == "user"] == ["hi", "again"]
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"


async def test_terminal_chat_says_clearly_when_no_gateway_runs(tmp_path: Path) -> None:
    with pytest.raises(ParleyError, match="is `parley serve` running"):
        await run_chat(f"http://127.0.0.1:{free_port()}", tmp_path / "t", _lines("hi"), print)
