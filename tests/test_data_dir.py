"""The data directory and everything Parley writes in it are readable by their owner only."""

from __future__ import annotations

import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory.archive.transcript import transcript_path, write_transcript
from memory.storage.files import private_dir
from tests.fakes.llm_server import FakeLLM
from tests.support.archive_checks import marked_text
from tests.support.harness import make_settings, running_gateway
from tests.support.polling import eventually

SMALL_MODEL = {"llm_context_tokens": 16_000}  # live window 2,500 tokens: archives soon


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _readable_by_others(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}: {_mode(path):o}"
        for path in (root, *root.rglob("*"))
        if _mode(path) & 0o077
    ]


async def test_a_fresh_data_dir_and_all_a_gateway_writes_there_are_owner_only(
    tmp_path: Path, llm: FakeLLM
) -> None:
    data = tmp_path / "data"
    settings = make_settings(
        f"sqlite+aiosqlite:///{data / 'parley.db'}", data, llm, secret_key=None, **SMALL_MODEL
    )
    archive = data / "archive"

    async def transcripts() -> list[Path]:
        return sorted(archive.rglob("*.txt")) if archive.exists() else []

    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()  # needs the signing key, created in the data dir
        for number in range(1, 8):
            response = await gw.send(token, marked_text(number, 600))
            assert response.status_code == 200, response.text
        written = await eventually(transcripts, until=bool)
        # While the gateway runs, SQLite's -wal and -shm files are there too.
        present = {path.name for path in data.iterdir()}
        loose = _readable_by_others(data)

    assert {"parley.db", "parley.db-wal", "secret_key", "archive"} <= present
    assert written
    assert _mode(data) == 0o700
    assert loose == []
    assert _readable_by_others(data) == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_loose_modes_an_older_version_left_are_tightened(
    database_url: str, tmp_path: Path
) -> None:
    # The fixture's database lies in tmp_path, copied with the process's default modes.
    data = tmp_path
    data.chmod(0o755)
    key = data / "secret_key"
    key.write_text("a-key-written-by-an-older-version-0123456789")
    key.chmod(0o644)
    (data / "parley.db").chmod(0o644)

    settings = make_settings(database_url, data, None, secret_key=None)
    async with running_gateway(settings) as gw:
        await gw.visitor()

    assert _mode(data) == 0o700
    assert _mode(data / "parley.db") == 0o600
    assert _mode(key) == 0o600
    assert _readable_by_others(data) == []


def test_a_transcript_is_written_whole_and_owner_only(tmp_path: Path) -> None:
    archive = tmp_path / "data" / "archive"
    start = datetime(2024, 5, 1, tzinfo=UTC)
    path = transcript_path(archive, uuid.uuid4(), 7, start)

    write_transcript(path, "[2024-05-01 10:00 · webchat · user]\nhello\n")
    write_transcript(path, "[2024-05-01 10:00 · webchat · user]\nhello again\n")

    assert path.read_text(encoding="utf-8").endswith("hello again\n")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert _mode(archive) == 0o700
    assert _mode(archive.parent) == 0o700  # created here, so private too


def test_a_transcript_tightens_the_archive_it_writes_into(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    path = transcript_path(archive, uuid.uuid4(), 1, datetime(2024, 5, 1, tzinfo=UTC))
    path.parent.mkdir(parents=True)
    for directory in (archive, path.parent):
        directory.chmod(0o755)

    write_transcript(path, "text\n")

    assert _readable_by_others(archive) == []


def test_only_directories_it_creates_are_made_private(tmp_path: Path) -> None:
    # An existing parent may be a home directory: its modes are not Parley's to change.
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)

    private_dir(home / "parley" / "data")

    assert _mode(home) == 0o755
    assert _mode(home / "parley") == 0o700
    assert _mode(home / "parley" / "data") == 0o700
