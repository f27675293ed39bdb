"""How fast the gateway acknowledges signed platform webhooks that each start a turn.

    python -m bench.webhook_ack [--platforms telegram,whatsapp] [--count N] [--rate R]
                                [--in-flight F] [--chats C] [--rounds K] [--json]

The gateway as shipped (`parley serve` in its own process, default log level written
to a file or /dev/null, the model over HTTP, Telegram in webhook mode and WhatsApp with
a real app secret, both delivering to fakes) against a bare app that checks the same
secret or signature and does one INSERT + COMMIT (`bench.webhook_baseline`), in
alternating segments: baseline, gateway, baseline, gateway, per platform.

Each segment offers N distinct, real-shaped, signed webhooks open-loop at R a second,
at most F in flight, spread over C chats (update k goes to chat k mod C). Latency is
counted from when an update was due, so waiting for a free slot counts (no coordinated
omission). After a gateway segment the benchmark waits (polling, with a deadline) until
every chat's last update has been answered on the platform, then checks that per chat
the replies came in order, that every update was stored and that no conversation still
owes a reply.

Goal: every update acknowledged with a 2xx, gateway p99 <= max(50 ms, 2 x the
baseline's p99 in the same run), acknowledgements per second >= 0.6 x the baseline's,
the turns caught up afterwards, in order per conversation, nothing lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shlex
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import asyncpg
import httpx
from sqlalchemy import func, select

from bench.memory_support import (
    ROOT,
    backend,
    machine,
    machine_line,
    migrated_engine,
    normalise_url,
    percentile,
    process_cpu_seconds,
    sqlite_url,
)
from bench.turn_load import collector_paused
from bench.webhook_baseline import TELEGRAM_HEADER
from bench.webhook_fakes import message_text
from memory.storage.models import Conversation, Delivery, Message, Role
from tests.fakes import graph_api, telegram_api
from tests.support.process import free_port, parley_env, stop_process

Platform = Literal["telegram", "whatsapp"]
PLATFORMS: tuple[Platform, ...] = ("telegram", "whatsapp")
ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"
START_SECONDS = 60.0
POLL_SECONDS = 0.1
GOAL_P99_MS = 50.0
GOAL_P99_RATIO = 2.0
GOAL_THROUGHPUT_RATIO = 0.6
# A generator that sends its updates later than this (p99) is part of what it measures.
GENERATOR_LATE_MS = 10.0


@dataclass(frozen=True)
class Options:
    platforms: tuple[Platform, ...] = PLATFORMS
    count: int = 2000
    rate: float = 200.0
    in_flight: int = 40
    chats: int = 200
    rounds: int = 2
    warmup: int = 100
    catch_up_seconds: float = 600.0
    database_url: str | None = None
    gateway_log: Path | None = None
    # Gateway settings besides the bench's own (`turn_concurrency=2`: PARLEY_TURN_…).
    settings: tuple[tuple[str, str], ...] = ()
    command: str = ""


# One webhook as sent: raw body and headers.
Webhook = tuple[bytes, dict[str, str]]


@dataclass
class Segment:
    app: Literal["baseline", "gateway"]
    platform: Platform
    round: int  # 0 is the warm-up
    offered: int
    rate: float
    in_flight: int
    chats: int
    seconds: float = 0.0
    acks_per_second: float = 0.0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    non_2xx: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    # Server CPU (all threads) per offered update, during the load.
    server_cpu_ms: float | None = None
    client_cpu_ms: float = 0.0
    # How late the generator got to its updates, p99 (from the due time): its own share
    # of the latency.
    send_late_p99_ms: float = 0.0
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # Gateway segments only: after the load.
    caught_up: bool | None = None
    catch_up_seconds: float | None = None  # from the last acknowledgement
    catch_up_cpu_ms: float | None = None  # server CPU per update while catching up
    model_requests: int | None = None  # turns that called the model
    replies: int | None = None
    chats_not_answered_last: int | None = None
    chats_out_of_order: int | None = None
    repeated_replies: int | None = None  # answered the same last update as the reply before
    replies_unmarked: int | None = None
    # A few chats whose replies were not in order: chat -> the numbers answered, in order.
    out_of_order_examples: dict[str, list[int | None]] = field(default_factory=dict)
    stored: int | None = None  # of the offered updates, stored as user messages
    owing_conversations: int | None = None
    undelivered_replies: int | None = None
    lost: int | None = None
    latencies: list[float] = field(default_factory=list, repr=False)


@dataclass
class Verdict:
    platform: Platform
    baseline_p99_ms: float
    gateway_p99_ms: float
    baseline_acks_per_second: float
    gateway_acks_per_second: float
    p99_limit_ms: float
    p99_ratio: float
    throughput_ratio: float
    non_2xx: int
    lost: int
    caught_up: bool
    # The generator's own lateness in the gateway's rounds (worst round's p99): past
    # GENERATOR_LATE_MS, the latencies say as much about the generator as the gateway.
    generator_late_p99_ms: float
    met: bool


@dataclass
class Report:
    options: Options
    machine: dict[str, Any]
    load_average_before: tuple[float, float, float]
    load_average_after: tuple[float, float, float]
    model: str
    segments: list[Segment]
    verdicts: list[Verdict]

    def to_json(self) -> dict[str, Any]:
        options = asdict(self.options)
        options["gateway_log"] = str(self.options.gateway_log or os.devnull)
        return {
            "benchmark": "webhook_ack",
            "command": self.options.command,
            "options": options,
            "machine": self.machine,
            "load_average_before": self.load_average_before,
            "load_average_after": self.load_average_after,
            "model": self.model,
            "segments": [
                {k: v for k, v in asdict(s).items() if k != "latencies"} for s in self.segments
            ],
            "verdicts": [asdict(v) for v in self.verdicts],
        }


MODEL_NOTE = (
    "the test suite's fake OpenAI-compatible server in its own process (with the fake "
    "Telegram and Graph APIs), answering at once: no delay, a one-line reply in three "
    "streamed pieces"
)


# -- webhooks ----------------------------------------------------------------------------


def chat_keys(platform: Platform, tag: str, chats: int) -> list[str]:
    """The chats of one segment: Telegram user ids, WhatsApp numbers; never reused."""
    base = 100_000 * (1 + int(tag))
    if platform == "telegram":
        return [str(1_000_000_000 + base + i) for i in range(chats)]
    return [str(15_550_000_000_000 + base + i) for i in range(chats)]


def webhooks(
    platform: Platform, tag: str, count: int, chats: int
) -> tuple[list[Webhook], dict[str, int]]:
    """`count` signed webhooks, update k to chat k mod `chats`; and each chat's last
    message number."""
    keys = chat_keys(platform, tag, min(chats, count))
    out: list[Webhook] = []
    last: dict[str, int] = {}
    now = int(time.time())
    for index in range(count):
        key = keys[index % len(keys)]
        number = index // len(keys) + 1
        last[key] = number
        text = message_text(number, f"{tag}c{key}")
        if platform == "telegram":
            update = telegram_api.text_update(
                int(key), text, message_id=number, date=now, update_id=int(tag) * 10**7 + index
            )
            headers = {
                "Content-Type": "application/json",
                TELEGRAM_HEADER: telegram_api.WEBHOOK_SECRET,
            }
            out.append((json.dumps(update).encode(), headers))
        else:
            notification = graph_api.message_notification(
                key, text=text, name=f"Person {key[-4:]}", timestamp=now
            )
            out.append(graph_api.signed(notification))
    return out, last


# -- load ----------------------------------------------------------------------------------


async def offer(
    session: aiohttp.ClientSession,
    path: str,
    hooks: Sequence[Webhook],
    rate: float,
    in_flight: int,
) -> Offered:
    """Send `hooks` open-loop: hook k is due at start + k / rate, and goes once one of
    `in_flight` slots is free. Latencies run from the due time. The generator's own
    lateness runs from the due time, or from when the update before got its slot if
    that was later (waiting for a slot is the server's share), to when its loop got to
    the update: a busy generator would otherwise pass for a slow server."""
    slots = asyncio.Semaphore(in_flight)
    offered = Offered(latencies=[0.0] * len(hooks), late=[0.0] * len(hooks))

    async def send(index: int, due: float, body: bytes, headers: dict[str, str]) -> None:
        try:
            async with session.post(path, data=body, headers=headers) as response:
                await response.read()
                status = str(response.status)
        except aiohttp.ClientError as exc:
            status = type(exc).__name__
        finally:
            slots.release()
        done = time.perf_counter()
        offered.latencies[index] = done - due
        offered.statuses[status] = offered.statuses.get(status, 0) + 1
        offered.last_done = max(offered.last_done, done)

    with collector_paused():
        start = time.perf_counter() + 0.05
        slotted = start  # when the update before got its slot
        async with asyncio.TaskGroup() as group:
            for index, (body, headers) in enumerate(hooks):
                due = start + index / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                offered.late[index] = time.perf_counter() - max(due, slotted)
                await slots.acquire()
                slotted = time.perf_counter()
                group.create_task(send(index, due, body, headers))
    offered.seconds = offered.last_done - start
    return offered


@dataclass
class Offered:
    """What `offer` saw: per update, seconds from its due time to its answer, and to
    when the generator got to it; answers by status; the seconds from the first due
    time to the last answer."""

    latencies: list[float]
    late: list[float]
    statuses: dict[str, int] = field(default_factory=dict)
    last_done: float = 0.0
    seconds: float = 0.0


# -- processes -------------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    url: str


def read_if_there(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


async def wait_for_file(path: Path, process: asyncio.subprocess.Process, name: str) -> str:
    """What a child writes to `path` once it serves (it writes the file whole, at once)."""
    deadline = time.monotonic() + START_SECONDS
    while (text := read_if_there(path)) is None:
        if process.returncode is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before it started")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} did not start within {START_SECONDS} s")
        await asyncio.sleep(POLL_SECONDS)
    return text


async def wait_ready(url: str, process: asyncio.subprocess.Process, name: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    async with httpx.AsyncClient() as client:
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} before it was ready")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} was not ready within {START_SECONDS} s")
            await asyncio.sleep(POLL_SECONDS)


def python_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@contextlib.asynccontextmanager
async def child(
    name: str, args: Sequence[str], env: dict[str, str], cwd: Path, log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("ab") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *args, env=env, cwd=cwd, stdout=sink, stderr=sink
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            try:
                await stop_process(process, signal.SIGTERM, 30)
            except TimeoutError:
                await stop_process(process, signal.SIGKILL, 10)


def gateway_env(
    database_url: str,
    data_dir: Path,
    port: int,
    fakes: dict[str, str],
    settings: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    env = parley_env(
        **dict(settings),
        database_url=database_url,
        data_dir=str(data_dir),
        host="127.0.0.1",
        port=str(port),
        admin_token=ADMIN_TOKEN,
        llm_provider="openai",
        llm_base_url=fakes["llm"],
        llm_api_key="sk-bench-key-0123456789",
        llm_model="fake-model",
        telegram_token=telegram_api.TOKEN,
        telegram_webhook_secret=telegram_api.WEBHOOK_SECRET,
        telegram_mode="webhook",
        telegram_api_url=fakes["telegram"],
        telegram_policy="open",
        whatsapp_token=graph_api.TOKEN,
        whatsapp_app_secret=graph_api.APP_SECRET,
        whatsapp_verify_token=graph_api.VERIFY_TOKEN,
        whatsapp_phone_number_id=graph_api.PHONE_NUMBER_ID,
        whatsapp_api_url=fakes["graph"],
        whatsapp_policy="open",
    )
    env["PYTHONPATH"] = str(ROOT)
    return env


@dataclass
class Processes:
    fakes: dict[str, str]  # base URLs, as `bench.webhook_fakes` writes them
    baseline: Child
    gateway: Child


@contextlib.asynccontextmanager
async def three_processes(
    database_url: str,
    directory: Path,
    gateway_args: Sequence[str],
    settings: Sequence[tuple[str, str]],
    gateway_log: Path,
    fakes_args: Sequence[str] = (),
) -> AsyncIterator[Processes]:
    """The fakes, the baseline and the gateway (`python <gateway_args>`, run where no
    `.env` is, so only the settings given here apply), each ready; stopped on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        logs = directory / "children.log"
        fakes_file = directory / "fakes.json"
        fakes_process = await stack.enter_async_context(
            child(
                "fakes",
                ["-m", "bench.webhook_fakes", "--port-file", str(fakes_file), *fakes_args],
                python_env(),
                ROOT,
                logs,
            )
        )
        fakes: dict[str, str] = json.loads(
            await wait_for_file(fakes_file, fakes_process, "the fakes")
        )
        port_file = directory / "baseline.port"
        baseline = await stack.enter_async_context(
            child(
                "baseline",
                [
                    "-m",
                    "bench.webhook_baseline",
                    "--database-url",
                    database_url,
                    "--port-file",
                    str(port_file),
                ],
                python_env(),
                ROOT,
                logs,
            )
        )
        base_url = f"http://127.0.0.1:{await wait_for_file(port_file, baseline, 'the baseline')}"
        port = free_port()
        data_dir = directory / "data"
        data_dir.mkdir()
        gateway = await stack.enter_async_context(
            child(
                "gateway",
                gateway_args,
                gateway_env(database_url, data_dir, port, fakes, settings),
                directory,
                gateway_log,
            )
        )
        gateway_url = f"http://127.0.0.1:{port}"
        await wait_ready(base_url, baseline, "the baseline")
        await wait_ready(gateway_url, gateway, "the gateway")
        yield Processes(
            fakes, Child("baseline", baseline, base_url), Child("gateway", gateway, gateway_url)
        )


# -- databases -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def scratch_database(url: str | None, directory: Path) -> AsyncIterator[str]:
    """A fresh, migrated database: a SQLite file, or a Postgres database created on the
    server of `url` for this run and dropped after it."""
    if url is None or backend(normalise_url(url)) == "sqlite":
        resolved = sqlite_url(directory / "parley.db")
        engine = await migrated_engine(resolved)
        await engine.dispose()
        yield resolved
        return
    admin = normalise_url(url).replace("postgresql+asyncpg://", "postgresql://")
    name = f"parley_ackbench_{uuid.uuid4().hex[:12]}"
    connection = await asyncpg.connect(admin, timeout=10)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    scratch = normalise_url(admin.rsplit("/", 1)[0] + "/" + name)
    try:
        engine = await migrated_engine(scratch)
        await engine.dispose()
        yield scratch
    finally:
        connection = await asyncpg.connect(admin, timeout=10)
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await connection.close()


async def database_checks(database_url: str, platform: Platform, tag: str) -> dict[str, int]:
    """What the database says after a gateway segment: its updates stored as user
    messages, conversations still owing a reply, replies not (yet) delivered."""
    engine = await migrated_engine(database_url)  # already at head: no change
    try:
        async with engine.connect() as conn:
            stored = await conn.scalar(
                select(func.count())
                .select_from(Message)
                .where(
                    Message.role == Role.USER,
                    Message.channel == platform,
                    Message.text.like(f"%-of-{tag}c%"),
                )
            )
            owing = await conn.scalar(
                select(func.count())
                .select_from(Conversation)
                .where(Conversation.answered_seq < Conversation.last_user_seq)
            )
            undelivered = await conn.scalar(
                select(func.count())
                .select_from(Message)
                .where(
                    Message.role == Role.ASSISTANT,
                    Message.delivery.in_((Delivery.PENDING, Delivery.FAILED)),
                )
            )
    finally:
        await engine.dispose()
    return {"stored": stored or 0, "owing": owing or 0, "undelivered": undelivered or 0}


# -- the run ---------------------------------------------------------------------------------


def ms(value: float) -> float:
    return round(value * 1000, 2)


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def figures(segment: Segment, offered: Offered) -> None:
    ordered = sorted(offered.latencies)
    segment.latencies = offered.latencies
    segment.seconds = round(offered.seconds, 3)
    segment.acks_per_second = round(len(ordered) / offered.seconds, 1)
    segment.send_late_p99_ms = ms(percentile(sorted(offered.late), 99))
    segment.p50_ms = ms(percentile(ordered, 50))
    segment.p90_ms = ms(percentile(ordered, 90))
    segment.p99_ms = ms(percentile(ordered, 99))
    segment.max_ms = ms(ordered[-1])
    segment.statuses = offered.statuses
    segment.non_2xx = sum(n for status, n in offered.statuses.items() if not status.startswith("2"))


class Bench:
    def __init__(
        self, options: Options, database_url: str, children: dict[str, Child], fakes: dict[str, str]
    ) -> None:
        self.options = options
        self.database_url = database_url
        self.children = children
        self.fakes = fakes
        self.tags = iter(range(1, 10_000))

    async def state(self, client: httpx.AsyncClient) -> dict[str, Any]:
        response = await client.get(f"{self.fakes['state']}/state")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    async def segment(
        self,
        client: httpx.AsyncClient,
        session: aiohttp.ClientSession,
        app: Literal["baseline", "gateway"],
        platform: Platform,
        round_: int,
        count: int,
    ) -> Segment:
        options = self.options
        tag = f"{next(self.tags):04d}"
        hooks, last = webhooks(platform, tag, count, options.chats)
        target = self.children[app]
        segment = Segment(app, platform, round_, count, options.rate, options.in_flight, len(last))
        before_state = await self.state(client) if app == "gateway" else None
        cpu_before = process_cpu_seconds(target.process.pid)
        client_before = time.process_time()
        offered = await offer(
            session, f"{target.url}/webhooks/{platform}", hooks, options.rate, options.in_flight
        )
        loaded = time.perf_counter()
        cpu_loaded = process_cpu_seconds(target.process.pid)
        segment.client_cpu_ms = ms((time.process_time() - client_before) / count)
        if cpu_before is not None and cpu_loaded is not None:
            segment.server_cpu_ms = ms((cpu_loaded - cpu_before) / count)
        figures(segment, offered)
        segment.load_average = loadavg()
        if app == "gateway":
            assert before_state is not None
            await self.catch_up(
                client, segment, platform, tag, last, before_state, loaded, cpu_loaded
            )
        return segment

    async def catch_up(
        self,
        client: httpx.AsyncClient,
        segment: Segment,
        platform: Platform,
        tag: str,
        last: dict[str, int],
        before: dict[str, Any],
        loaded: float,
        cpu_loaded: float | None,
    ) -> None:
        deadline = loaded + self.options.catch_up_seconds
        while True:
            state = await self.state(client)
            replies: dict[str, list[int | None]] = state["replies"][platform]
            behind = [k for k, n in last.items() if not replies.get(k) or replies[k][-1] != n]
            if not behind or time.perf_counter() > deadline:
                break
            await asyncio.sleep(POLL_SECONDS)
        done = time.perf_counter()
        segment.caught_up = not behind
        segment.catch_up_seconds = round(done - loaded, 3)
        cpu_done = process_cpu_seconds(self.children["gateway"].process.pid)
        if cpu_loaded is not None and cpu_done is not None:
            segment.catch_up_cpu_ms = ms((cpu_done - cpu_loaded) / segment.offered)
        segment.model_requests = state["model_requests"] - before["model_requests"]
        mine = {k: replies.get(k, []) for k in last}
        segment.replies = sum(len(r) for r in mine.values())
        segment.chats_not_answered_last = len(behind)
        segment.replies_unmarked = sum(1 for r in mine.values() for n in r if n is None)
        # A reply whose turn saw no newer update than the one before it answered again
        # (the turn before read updates that came in after it began): a repeat, not
        # out of order.
        disordered = {
            k: r
            for k, r in mine.items()
            if any(b is None or a is None or b < a for a, b in itertools.pairwise(r))
        }
        segment.repeated_replies = sum(
            1 for r in mine.values() for a, b in itertools.pairwise(r) if a is not None and a == b
        )
        segment.chats_out_of_order = len(disordered)
        segment.out_of_order_examples = dict(list(disordered.items())[:5])
        # The platform has a reply a moment before the gateway records it as sent.
        while True:
            checks = await database_checks(self.database_url, platform, tag)
            settled = not checks["owing"] and not checks["undelivered"]
            if settled or time.perf_counter() > deadline:
                break
            await asyncio.sleep(POLL_SECONDS)
        segment.stored = checks["stored"]
        segment.owing_conversations = checks["owing"]
        segment.undelivered_replies = checks["undelivered"]
        segment.lost = (segment.offered - segment.stored) + len(behind)


def verdicts(segments: Sequence[Segment], platforms: Sequence[Platform]) -> list[Verdict]:
    out = []
    for platform in platforms:
        measured = [s for s in segments if s.platform == platform and s.round > 0]
        base = [s for s in measured if s.app == "baseline"]
        gate = [s for s in measured if s.app == "gateway"]
        if not base or not gate:
            continue

        def pooled(group: list[Segment]) -> tuple[float, float]:
            ordered = sorted(x for s in group for x in s.latencies)
            acks = len(ordered) / sum(s.seconds for s in group)
            return ms(percentile(ordered, 99)), round(acks, 1)

        base_p99, base_acks = pooled(base)
        gate_p99, gate_acks = pooled(gate)
        limit = max(GOAL_P99_MS, GOAL_P99_RATIO * base_p99)
        non_2xx = sum(s.non_2xx for s in gate)
        lost = sum(s.lost or 0 for s in gate)
        caught_up = all(
            s.caught_up and not s.chats_out_of_order and not s.owing_conversations for s in gate
        )
        throughput_ratio = round(gate_acks / base_acks, 3)
        met = (
            gate_p99 <= limit
            and throughput_ratio >= GOAL_THROUGHPUT_RATIO
            and non_2xx == 0
            and lost == 0
            and caught_up
        )
        out.append(
            Verdict(
                platform=platform,
                baseline_p99_ms=base_p99,
                gateway_p99_ms=gate_p99,
                baseline_acks_per_second=base_acks,
                gateway_acks_per_second=gate_acks,
                p99_limit_ms=round(limit, 2),
                p99_ratio=round(gate_p99 / base_p99, 2),
                throughput_ratio=throughput_ratio,
                non_2xx=non_2xx,
                lost=lost,
                caught_up=caught_up,
                generator_late_p99_ms=max(s.send_late_p99_ms for s in gate),
                met=met,
            )
        )
    return out


async def run(options: Options) -> Report:
    facts = machine()
    load_before = loadavg()
    segments: list[Segment] = []
    with_log = options.gateway_log
    async with contextlib.AsyncExitStack() as stack:
        directory = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="parley-ackbench-"))
        )
        database_url = await stack.enter_async_context(
            scratch_database(options.database_url, directory)
        )
        started = await stack.enter_async_context(
            three_processes(
                database_url,
                directory,
                ["-m", "gateway", "serve"],
                options.settings,
                with_log if with_log is not None else Path(os.devnull),
            )
        )
        children, fakes = {"baseline": started.baseline, "gateway": started.gateway}, started.fakes
        bench = Bench(options, database_url, children, fakes)
        timeout = httpx.Timeout(options.catch_up_seconds)
        # The webhooks go through aiohttp: under 40 requests in flight httpx's pool took
        # 4-5 ms of this process's CPU a request where it took 1.5-2 with a few, so a
        # gateway a little behind put the generator itself behind (bench/README.md).
        connector = aiohttp.TCPConnector(limit=options.in_flight)
        async with (
            httpx.AsyncClient(timeout=timeout) as client,
            aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=options.catch_up_seconds),
            ) as session,
        ):
            for platform in options.platforms:
                rounds = [(0, options.warmup)] if options.warmup else []
                rounds += [(r, options.count) for r in range(1, options.rounds + 1)]
                for round_, count in rounds:
                    for app in ("baseline", "gateway"):
                        segment = await bench.segment(client, session, app, platform, round_, count)
                        segments.append(segment)
                        print(segment_line(segment), file=sys.stderr, flush=True)
    return Report(
        options=options,
        machine=facts,
        load_average_before=load_before,
        load_average_after=loadavg(),
        model=MODEL_NOTE,
        segments=segments,
        verdicts=verdicts(segments, options.platforms),
    )


# -- output ----------------------------------------------------------------------------------


def segment_line(s: Segment) -> str:
    label = "warm-up" if s.round == 0 else f"round {s.round}"
    line = (
        f"{s.platform:8} {s.app:8} {label:8} {s.offered} offered: {s.acks_per_second:7.1f} acks/s "
        f"p50 {s.p50_ms:9.2f} p90 {s.p90_ms:9.2f} p99 {s.p99_ms:9.2f} max {s.max_ms:9.2f} ms, "
        f"non-2xx {s.non_2xx}, server CPU {s.server_cpu_ms} ms/update, load {s.load_average[0]}"
        f"\n{'':27} generator: CPU {s.client_cpu_ms} ms/update, late p99 "
        f"{s.send_late_p99_ms} ms"
    )
    if s.app == "gateway":
        line += (
            f"\n{'':27} caught up {s.caught_up} {s.catch_up_seconds} s after the last ack "
            f"(CPU {s.catch_up_cpu_ms} ms/update), turns {s.model_requests}, replies {s.replies}, "
            f"stored {s.stored}/{s.offered}, out of order {s.chats_out_of_order}, "
            f"repeats {s.repeated_replies}, "
            f"owing {s.owing_conversations}, undelivered {s.undelivered_replies}, lost {s.lost}"
        )
    return line


def render(report: Report) -> str:
    o = report.options
    lines = [
        f"webhook acknowledgements: {o.count} updates a segment at {o.rate:g}/s, at most "
        f"{o.in_flight} in flight, over {o.chats} chats, {o.rounds} rounds a platform "
        f"(+ {o.warmup} warm-up)",
        f"machine: {machine_line(report.machine)}",
        f"load average before {report.load_average_before}, after {report.load_average_after}",
        f"model: {report.model}",
        "",
        *(segment_line(s) for s in report.segments),
        "",
    ]
    for v in report.verdicts:
        lines.append(
            f"{v.platform}: gateway p99 {v.gateway_p99_ms} ms vs baseline {v.baseline_p99_ms} ms "
            f"(x{v.p99_ratio}; limit {v.p99_limit_ms} ms), acks/s {v.gateway_acks_per_second} vs "
            f"{v.baseline_acks_per_second} (x{v.throughput_ratio}; goal x{GOAL_THROUGHPUT_RATIO}), "
            f"non-2xx {v.non_2xx}, lost {v.lost}, caught up in order {v.caught_up}: "
            f"goal {'MET' if v.met else 'NOT MET'}"
        )
        if v.generator_late_p99_ms > GENERATOR_LATE_MS:
            lines.append(
                f"  the generator itself was late (p99 {v.generator_late_p99_ms} ms in a "
                "gateway round): those latencies are partly its own"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.webhook_ack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--platforms", default=",".join(PLATFORMS), help="comma-separated")
    parser.add_argument("--count", type=int, default=Options.count, help="updates a segment")
    parser.add_argument("--rate", type=float, default=Options.rate, help="updates offered a second")
    parser.add_argument("--in-flight", type=int, default=Options.in_flight)
    parser.add_argument("--chats", type=int, default=Options.chats)
    parser.add_argument("--rounds", type=int, default=Options.rounds, help="baseline+gateway pairs")
    parser.add_argument("--warmup", type=int, default=Options.warmup, help="updates, not measured")
    parser.add_argument("--catch-up-seconds", type=float, default=Options.catch_up_seconds)
    parser.add_argument("--database-url", help="postgresql://… (a scratch database is made on it)")
    parser.add_argument("--gateway-log", type=Path, help="the gateway's log (default /dev/null)")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a gateway setting, e.g. turn_concurrency=2 (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if bad := [s for s in args.setting if "=" not in s]:
        parser.error(f"--setting takes NAME=VALUE, not {bad[0]!r}")
    platforms = tuple(p.strip() for p in args.platforms.split(",") if p.strip())
    for name in platforms:
        if name not in PLATFORMS:
            parser.error(f"unknown platform {name!r}")
    options = Options(
        platforms=platforms,
        count=args.count,
        rate=args.rate,
        in_flight=args.in_flight,
        chats=args.chats,
        rounds=args.rounds,
        warmup=args.warmup,
        catch_up_seconds=args.catch_up_seconds,
        database_url=args.database_url,
        gateway_log=args.gateway_log,
        settings=tuple(_name_value(setting) for setting in args.setting),
        command=shlex.join(
            ["python", "-m", "bench.webhook_ack", *(sys.argv[1:] if argv is None else argv)]
        ),
    )
    report = asyncio.run(run(options))
    print(json.dumps(report.to_json(), indent=2) if args.json else render(report))
    return 0 if all(v.met for v in report.verdicts) else 1


def _name_value(setting: str) -> tuple[str, str]:
    name, _, value = setting.partition("=")
    return name, value


if __name__ == "__main__":
    sys.exit(main())
