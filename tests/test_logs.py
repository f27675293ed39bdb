"""`parley serve` logs one JSON line per request with a request id, formats the
libraries' lines the same way, honours PARLEY_LOG_LEVEL and never logs message text."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx

from tests.support.process import free_port, parley_env, parley_serve

SECRET_TEXT = "the words only the person and the model may read"


def _lines(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


async def test_serve_writes_an_access_line_per_request_and_no_message_text(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = parley_env(port=str(port), data_dir=str(tmp_path / "data"), log_level="info")
    async with parley_serve(env, tmp_path) as process:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            token = (await client.post("/webchat/sessions")).json()["token"]
            sent = await client.post(
                "/webchat/messages",
                json={"text": SECRET_TEXT},
                headers={"Authorization": f"Bearer {token}", "X-Request-ID": "trace-42"},
            )
            missing = await client.get("/no/such/page?token=wc1.secret")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)

    lines = _lines(stderr)
    access = [line for line in lines if line.get("event") == "request"]
    assert sent.status_code == 200
    assert sent.headers["x-request-id"] == "trace-42"
    assert missing.headers["x-request-id"]  # made up when the client sent none
    assert {(a["method"], a["path"], a["status"]) for a in access} >= {
        ("POST", "/webchat/sessions", 201),
        ("POST", "/webchat/messages", 200),
        ("GET", "/no/such/page", 404),
    }
    assert [a["request_id"] for a in access if a["path"] == "/webchat/messages"] == ["trace-42"]
    assert any(line.get("logger") == "uvicorn.error" for line in lines)  # libraries, as JSON
    assert all({"timestamp", "level", "event"} <= set(line) for line in lines)
    assert SECRET_TEXT not in stderr
    assert "wc1.secret" not in stderr


async def test_log_level_warning_keeps_info_lines_out(tmp_path: Path) -> None:
    port = free_port()
    env = parley_env(port=str(port), data_dir=str(tmp_path / "data"), log_level="warning")
    async with parley_serve(env, tmp_path) as process:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).status_code == 200
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)

    assert not [line for line in _lines(stderr) if line["level"] in ("info", "debug")]
