"""What fetching and reading people's files costs the gateway while it runs: memory held
and the event loop's responsiveness (issue 29).

The gateway (SQLite) runs under uvicorn in this process, on one event loop, as `parley
serve` runs; the fake Telegram holding the files and the fake vision model that also
transcribes run in a process of their own, so only the gateway's memory is measured. Photos of about 15 MB (noise, so JPEG cannot shrink them) and
voice notes of about 19 MB are sent as Telegram updates; each is fetched after its
update is acknowledged, decoded (photos: Pillow, in a thread), kept and answered.

Phases, in one run (the baseline first, on the same loop and process):
- `text`: text-only updates, as many as there are files;
- `one at a time`: each file's update sent once the last one's reply has arrived;
- `together`: every update at once, each from another person (one fetch each).

Per phase: the process's peak resident memory above what it held before the phase
(sampled every 5 ms from /proc), divided by the largest file's size; and the event
loop's lag (how late a 5 ms timer fires: p50, p99, max), against the text phase's.
Decoding and downloading never on the loop: the lag stays the baseline's. One file at a
time per fetch: the peak is a few times one file, and together it grows with the
number of files fetched at once, not with how many are queued.

    .venv/bin/python -m bench.media_memory [--photos 4] [--voices 2] [--scale 1] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from PIL import Image

from memory.storage.models import Role
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Gateway, make_settings, running_gateway
from tests.support.platforms import SECRET_HEADER
from tests.support.process import free_port

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = 0.005
MB = 1024 * 1024


def noise_photo(width: int, height: int) -> bytes:
    """A JPEG that stays large: noise, at the quality a phone uses."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(
        out, format="JPEG", quality=95
    )
    return out.getvalue()


def voice_note(size: int) -> bytes:
    return b"OggS\x00\x02" + bytes(22) + b"\x13OpusHead\x01\x01" + os.urandom(size)


def the_files(photos: int, voices: int, scale: float) -> dict[str, bytes]:
    """Photos of 4000×3000 and voice notes of 19 MB, or `scale` of that (a quick run)."""
    side = (int(4000 * scale), int(3000 * scale))
    files = {f"photo{n}": noise_photo(*side) for n in range(photos)}
    return files | {f"voice{n}": voice_note(int(19 * MB * scale)) for n in range(voices)}


def serve_fakes(ports: tuple[int, int], photos: int, voices: int, scale: float, sizes: Any) -> None:
    """The other process: Telegram with the files, and the model."""

    async def fakes() -> None:
        fake, llm = tg.FakeTelegram(), FakeLLM()
        fake.files |= the_files(photos, voices, scale)
        sizes.update({name: len(data) for name, data in fake.files.items()})
        servers = [
            uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning", lifespan="off"))
            for app, port in ((fake.app, ports[0]), (llm.app, ports[1]))
        ]
        await asyncio.gather(*(server.serve() for server in servers))

    asyncio.run(fakes())


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


class Probe:
    """The loop's lag and the process's memory, sampled while a phase runs."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.peak = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Probe:
        self.start = rss()
        self.peak = self.start
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _sample(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            self.lags.append(time.perf_counter() - before - TICK)
            self.peak = max(self.peak, rss())

    def report(self, largest: int) -> dict[str, float]:
        lags = sorted(self.lags) or [0.0]
        return {
            "peak_above_start_mb": round((self.peak - self.start) / MB, 1),
            "peak_per_largest_file": round((self.peak - self.start) / largest, 2),
            "lag_p50_ms": round(1000 * statistics.median(lags), 2),
            "lag_p99_ms": round(1000 * lags[int(0.99 * (len(lags) - 1))], 2),
            "lag_max_ms": round(1000 * lags[-1], 2),
        }


def _file_update(user: int, n: int, file_id: str) -> dict[str, Any]:
    update = tg.text_update(user, "", message_id=n)
    message = update["message"]
    del message["text"]
    if file_id.startswith("photo"):
        message["photo"] = [
            {"file_id": file_id, "file_unique_id": f"u{n}", "width": 1, "height": 1}
        ]
    else:
        message["voice"] = {"file_id": file_id, "file_unique_id": f"u{n}", "duration": 60}
    return update


async def run(photos: int, voices: int, scale: float = 1.0) -> dict[str, Any]:
    ports = (free_port(), free_port())
    manager = multiprocessing.Manager()
    sizes = manager.dict()
    fakes = multiprocessing.Process(target=serve_fakes, args=(ports, photos, voices, scale, sizes))
    fakes.start()
    try:
        return await _measure(ports, photos, voices, sizes)
    finally:
        fakes.terminate()
        fakes.join()
        manager.shutdown()


async def _measure(ports: tuple[int, int], photos: int, voices: int, sizes: Any) -> dict[str, Any]:
    telegram, model = (f"http://127.0.0.1:{port}" for port in ports)
    async with httpx.AsyncClient() as http:
        deadline = time.monotonic() + 120
        while len(sizes) < photos + voices or not await _up(http, model):
            if time.monotonic() > deadline:
                raise TimeoutError("the fakes did not start")
            await asyncio.sleep(0.1)
    largest = max(sizes.values())
    results: dict[str, Any] = {"files": dict(sizes), "largest_file_mb": round(largest / MB, 1)}
    llm = FakeLLM()
    llm.base_url = model
    with tempfile.TemporaryDirectory() as data_dir:
        settings = make_settings(
            f"sqlite+aiosqlite:///{data_dir}/bench.db",
            Path(data_dir),
            llm,
            telegram_policy="open",
            telegram_token=tg.TOKEN,
            telegram_webhook_secret=tg.WEBHOOK_SECRET,
            telegram_api_url=telegram,
        )
        async with running_gateway(settings) as gw:
            headers = {SECRET_HEADER: tg.WEBHOOK_SECRET}
            runner = gw.services.runner

            async def send(update: dict[str, Any]) -> None:
                response = await gw.http.post("/webhooks/telegram", json=update, headers=headers)
                response.raise_for_status()
                await runner.idle()  # the turn, which waited for its file, is done

            names = sorted(dict(sizes))
            answered: dict[str, int] = {}
            async with Probe() as text:
                for n in range(len(names)):
                    await send(tg.text_update(5000, f"hello {n}", message_id=100 + n))
            results["text"] = text.report(largest)
            answered["text"] = await _replies(gw, 5000)
            async with Probe() as serial:
                for n, name in enumerate(names):
                    await send(_file_update(5001, 200 + n, name))
            results["one at a time"] = serial.report(largest)
            answered["one at a time"] = await _replies(gw, 5001)
            async with Probe() as together:
                await asyncio.gather(
                    *(send(_file_update(6000 + n, 300 + n, name)) for n, name in enumerate(names))
                )
            results["together"] = together.report(largest)
            answered["together"] = sum([await _replies(gw, 6000 + n) for n in range(len(names))])
            results["answered"] = answered
    return results


async def _replies(gw: Gateway, telegram_user: int) -> int:
    """How many replies the person's conversation holds."""
    identity = await gw.services.core.identity("telegram", str(telegram_user))
    stored = await gw.services.repos.messages.messages_after(identity.conversation_id, 0, 1000)
    return sum(1 for m in stored if m.role is Role.ASSISTANT)


async def _up(http: httpx.AsyncClient, url: str) -> bool:
    try:
        await http.get(url)
    except httpx.HTTPError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=4)
    parser.add_argument("--voices", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="of the files' sizes")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = asyncio.run(run(args.photos, args.voices, args.scale))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
