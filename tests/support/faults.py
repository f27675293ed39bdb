"""A fault driver: Parley on Postgres, its own Redis and arq workers, under Telegram webhook
and web chat traffic, while the gateway, the workers and Redis are killed at random.

Everything runs on the loopback: `parley serve` and `parley worker` as child processes
(their stderr in files under the test's directory), a private `redis-server` on a free
port, and the fake model and fake Telegram Bot API inside the test process. The plan
(how many kills of what, the traffic, the gaps) comes from one seed, so a run can be
repeated; the timing of processes, of course, cannot.

Afterwards the checks read the database and the fake platform's records: what was
acknowledged is stored exactly once and answered, every archive job finished, the
archive's levels are well formed, and replies were sent once each, except where a kill
fell between Telegram taking a message and the gateway recording it (measured at each
kill).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import json
import os
import random
import re
import shutil
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import httpx
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.archiving import memory_limits
from gateway.settings import Settings
from memory.db import create_engine
from memory.limits import MemoryLimits
from tests.fakes.llm_server import Behaviour, FakeLLM, Reply
from tests.fakes.telegram_api import (
    WEBHOOK_SECRET,
    FakeTelegram,
    telegram_settings,
    text_update,
)
from tests.support.archive_checks import request_kind
from tests.support.databases import require_service
from tests.support.process import REPO, free_port, parley_env
from tests.support.servers import serve

ADMIN_TOKEN = "fault-admin-token-0123456789"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
START_SECONDS = 40.0  # a gateway start on a busy 2-core machine, Redis possibly down
MAX_STARTS = 400  # all starts of one process in a run: a crash loop ends the run


# -- the plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultPlan:
    """How much traffic, and how many kills of what, when.

    Kills are placed by the traffic's progress (a fraction of the messages acknowledged),
    so the plan holds however fast the machine is. Gateway kills stop at 85%. The last
    Redis outage comes between everyone's last two messages, once the turns before are
    done and their chunks summarised: the last turns then swap chunks in and queue work
    with Redis down, and no later message or restart answers a turn dropped then — only
    the code under test can. A few worker kills follow it (no later Redis restart
    clears the keys they leave behind)."""

    seed: int = 9
    telegram_users: int = 5
    messages_per_telegram_user: int = 30
    webchat_visitors: int = 3
    messages_per_visitor: int = 14
    redelivered_share: float = 0.2
    words_per_message: int = 55
    message_gap: tuple[float, float] = (0.1, 0.8)
    workers: int = 2
    serve_kills: int = 22
    serve_window: tuple[float, float] = (0.03, 0.85)
    worker_kills: int = 8  # during the traffic
    worker_window: tuple[float, float] = (0.05, 0.85)
    late_worker_kills: int = 4  # after the last Redis outage, aimed at fact extraction
    late_worker_gap: tuple[float, float] = (0.3, 1.0)
    redis_windows: tuple[tuple[float, float], ...] = ((0.15, 0.35), (0.45, 0.65))  # +1 last
    redis_down: tuple[float, float] = (3.0, 5.0)
    aimed_share: float = 0.5  # of the kills in the traffic, aimed at a model call in flight
    kill_delay: tuple[float, float] = (0.0, 0.5)  # after a kill's moment comes
    trap_seconds: float = 4.0  # how long an aimed kill waits for a model call
    ack_seconds: float = 120.0  # how long one message is retried before it counts as refused
    drive_seconds: float = 200.0  # the traffic-and-kills phase, at most

    @property
    def messages(self) -> int:
        return (
            self.telegram_users * self.messages_per_telegram_user
            + self.webchat_visitors * self.messages_per_visitor
        )

    @property
    def senders(self) -> int:
        return self.telegram_users + self.webchat_visitors

    def moments(self, rng: random.Random, count: int, window: tuple[float, float]) -> list[int]:
        """`count` points of progress (messages done) spread over `window`, one at random
        in each of `count` equal parts; all before the last round (which waits for the
        last Redis outage)."""
        low, high = window
        step = (high - low) / count
        last_round = self.messages - self.senders
        return [
            min(last_round, round((low + step * (i + rng.random())) * self.messages))
            for i in range(count)
        ]

    def aims(self, rng: random.Random, count: int) -> list[bool]:
        aimed = round(count * self.aimed_share)
        plan = [True] * aimed + [False] * (count - aimed)
        rng.shuffle(plan)
        return plan


def gateway_settings(
    *, data_dir: Path, database_url: str, redis_url: str, port: int, telegram: FakeTelegram
) -> dict[str, str]:
    """Settings of every child (`PARLEY_*` names, lower case), without the model's URL.

    Memory numbers are tiny so chunks are cut every few messages, consolidated and
    rolled up within the run; leases and retries are short so faults cost seconds."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "database_url": database_url,
        "redis_url": redis_url,
        "host": "127.0.0.1",
        "port": port,
        "admin_token": ADMIN_TOKEN,
        "secret_key": "fault-secret-key-0123456789abcdef",
        "telegram_policy": "open",
        "webchat_sessions_per_minute": 100_000,
        "webchat_messages_per_minute": 100_000,
        "reply_wait_seconds": 3,
        "llm_provider": "openai",
        "llm_api_key": "sk-fault-test",
        "llm_model": "fake-model",
        "llm_timeout_seconds": 20,
        "llm_retry_base_seconds": 0.05,
        # A 4096-token model: the limits below shrink to 1/32 (live 320, chunk 160).
        "llm_context_tokens": 4096,
        "llm_max_reply_tokens": 256,
        "live_window_tokens": 10_000,
        "chunk_tokens": 5_000,
        "chunk_min_tokens": 2_500,
        "consolidate_at": 3,
        "consolidate_count": 2,
        "rollup_keep": 1,
        "rollup_batch": 2,
        "sweep_interval_seconds": 1,
        "job_lease_seconds": 2,
        "archive_retry_base_seconds": 0.5,
        "archive_retry_max_seconds": 2,
        "delivery_retry_base_seconds": 0.1,
        "delivery_retry_max_seconds": 2,
    } | telegram_settings(telegram)
    return {key: str(value) for key, value in values.items()}


def limits_of(values: dict[str, str]) -> MemoryLimits:
    """The memory limits the children run with (after scaling to the model's window)."""
    settings = Settings(_env_file=None, **values)  # type: ignore[arg-type]
    return memory_limits(settings)


# -- the model: answers like a cooperative one, and can hold a call for a kill -------------

# Which process a model request came from: each child gets a base URL `/p/{tag}/v1`.
CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="?")


class CallerTags:
    """ASGI wrapper: `/p/{tag}/...` reaches the fake model as `/...`, `CALLER` set to tag."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith("/p/"):
            await self._app(scope, receive, send)
            return
        _, _, tag, rest = path.split("/", 3)
        inner = dict(scope, path=f"/{rest}", raw_path=f"/{rest}".encode())
        token = CALLER.set(tag)
        try:
            await self._app(inner, receive, send)
        finally:
            CALLER.reset(token)


class KilledClients:
    """ASGI wrapper for the fakes: a client killed while sending its request is no error
    (and no traceback on the test's output)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with contextlib.suppress(ClientDisconnect):
            await self._app(scope, receive, send)


@dataclass(eq=False)
class Trap:
    """Holds the next model call of one of `kinds` open until released."""

    kinds: frozenset[str]
    sprung: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    caller: str | None = None


class ModelScript:
    """The fake model's responder: every reply text is unique (so a reply sent twice is
    recognisable), summaries are short, fact extraction finds nothing (valid JSON)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._traps: list[Trap] = []

    def respond(self, body: dict[str, Any], number: int) -> Behaviour:
        kind = request_kind(body)
        caller = CALLER.get()
        self.calls[f"{caller} {kind}"] += 1
        gate = None
        for trap in self._traps:
            if kind in trap.kinds and trap.caller is None:
                trap.caller = caller
                trap.sprung.set()
                gate = trap.gate
                break
        return Reply(_answer(kind, number), gate=gate)

    @contextlib.asynccontextmanager
    async def trap(self, kinds: Iterable[str]) -> AsyncIterator[Trap]:
        """Arm a trap; on leaving, the held call (if any) is answered."""
        trap = Trap(frozenset(kinds))
        self._traps.append(trap)
        try:
            yield trap
        finally:
            self._traps.remove(trap)
            trap.gate.set()


def _answer(kind: str, number: int) -> str:
    if kind == "summary":
        return f"summary {number}: they talked about the weather and the garden."
    if kind == "extract":
        return json.dumps({"facts": []})  # no facts: valid in every answer format
    return f"reply {number}"


@contextlib.asynccontextmanager
async def fake_model(script: ModelScript) -> AsyncIterator[FakeLLM]:
    """The fake model server; `base_for(llm, tag)` is the URL a child with `tag` uses."""
    llm = FakeLLM()
    llm.responder = script.respond
    async with serve(KilledClients(CallerTags(llm.app))) as url:
        llm.base_url = url
        try:
            yield llm
        finally:
            llm._release()  # answers held requests, so the server can shut down


def base_for(llm: FakeLLM, tag: str) -> str:
    return f"{llm.base_url}/p/{tag}/v1"


@contextlib.asynccontextmanager
async def fake_platform() -> AsyncIterator[FakeTelegram]:
    """The fake Telegram Bot API (as `fake_telegram()`, quiet about killed clients)."""
    telegram = FakeTelegram()
    async with serve(KilledClients(telegram.app)) as url:
        telegram.base_url = url
        try:
            yield telegram
        finally:
            await telegram.close()


# -- processes -----------------------------------------------------------------------------


class Clock:
    """Seconds since the rig started, for logs and kill records."""

    def __init__(self) -> None:
        self._start = asyncio.get_running_loop().time()

    def __call__(self) -> float:
        return asyncio.get_running_loop().time() - self._start


async def _spawn(
    command: Sequence[str], env: dict[str, str], cwd: Path, log: Path, note: str
) -> asyncio.subprocess.Process:
    """Start `command` with stdout and stderr appended to `log` (after a `note` line)."""
    fd = _note(log, note)
    try:
        return await asyncio.create_subprocess_exec(
            *command, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=fd, stderr=fd
        )
    finally:
        os.close(fd)


def _note(log: Path, note: str) -> int:
    """Append `--- note ---` to a child's log; returns the open descriptor."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, f"--- {note} ---\n".encode())
    return fd


class RedisServer:
    """A private `redis-server` without persistence: killed, it comes back empty."""

    def __init__(self, directory: Path, clock: Clock) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            require_service("redis-server", FileNotFoundError("no redis-server on PATH"))
        assert binary is not None
        self._binary = binary
        self._directory = directory
        self._clock = clock
        self.port = free_port()
        self.log = directory / "redis.log"
        self.kills = 0
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        command = [
            self._binary,
            *("--port", str(self.port), "--bind", "127.0.0.1", "--save", ""),
            *("--appendonly", "no", "--dir", str(self._directory)),
        ]
        self._process = await _spawn(
            command, {}, self._directory, self.log, f"start at {self._clock():.1f}s"
        )
        await poll(self._answers, until=bool, seconds=10, interval=0.05)

    async def kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()
            self.kills += 1

    async def stop(self) -> None:
        await self.kill()

    async def _answers(self) -> bool:
        client = aioredis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            return bool(await client.ping())
        except (RedisError, OSError):
            return False
        finally:
            await client.aclose()


class Child:
    """One `parley` child process. Killed by the driver, it is started again by the
    driver; dying on its own is an unexpected exit, recorded and restarted at once."""

    def __init__(
        self,
        name: str,
        command: str,
        env: dict[str, str],
        cwd: Path,
        clock: Clock,
        health_url: str | None = None,
    ) -> None:
        self.name = name
        self.log = cwd / f"{name}.log"
        self.starts = 0
        self.failed_starts: list[str] = []
        self.unexpected_exits: list[str] = []
        self._command = [sys.executable, "-m", "gateway", command]
        self._env = env
        self._cwd = cwd
        self._clock = clock
        self._health_url = health_url
        self._process: asyncio.subprocess.Process | None = None
        self._killed: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._watchers: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        """Start it (again) and wait until it serves; give up after MAX_STARTS."""
        async with self._lock:
            while not self._closing and not self.alive:
                if self.starts >= MAX_STARTS:
                    raise RuntimeError(f"{self.name} keeps dying; see {self.log}")
                self.starts += 1
                note = f"start {self.starts} at {self._clock():.1f}s"
                process = await _spawn(self._command, self._env, self._cwd, self.log, note)
                self._process = process
                if await self._came_up(process):
                    os.close(_note(self.log, f"up at {self._clock():.1f}s"))
                    watcher = asyncio.create_task(self._watch(process), name=f"watch:{self.name}")
                    self._watchers.add(watcher)
                    watcher.add_done_callback(self._watchers.discard)
                    return
                self.failed_starts.append(f"{note}: exit code {process.returncode}")
                if process.returncode is None:
                    process.kill()
                await process.wait()

    async def kill(self) -> bool:
        """SIGKILL it and reap it; False if it was not running."""
        async with self._lock:
            process = self._process
            if process is None or process.returncode is not None:
                return False
            self._killed = process
            process.kill()
            await process.wait()
            return True

    async def close(self) -> None:
        self._closing = True
        async with self._lock:
            if self._process is not None and self._process.returncode is None:
                self._process.kill()
                await self._process.wait()
        for watcher in list(self._watchers):
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)

    async def _came_up(self, process: asyncio.subprocess.Process) -> bool:
        if self._health_url is None:
            return True
        url = self._health_url

        async def healthy() -> bool | None:
            if process.returncode is not None:
                return None  # died while starting
            try:
                async with httpx.AsyncClient(timeout=2) as client:
                    return (await client.get(url)).status_code == 200
            except httpx.TransportError:
                return False

        try:
            answer = await poll(healthy, until=lambda ok: ok is not False, seconds=START_SECONDS)
        except TimeoutError:
            return False
        return answer is True

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if self._closing or process is self._killed or process is not self._process:
            return
        self.unexpected_exits.append(f"{self.name} exited with {code} at {self._clock():.1f}s")
        await self.start()


async def poll(
    probe: Callable[[], Awaitable[Any]],
    *,
    until: Callable[[Any], bool],
    seconds: float,
    interval: float = 0.1,
) -> Any:
    """`eventually` with a gentler pace, for probes that query a database."""
    async with asyncio.timeout(seconds):
        while True:
            result = await probe()
            if until(result):
                return result
            await asyncio.sleep(interval)


# -- traffic --------------------------------------------------------------------------------

WORDS = (
    *("garden", "tomato", "bicycle", "river", "lantern", "meeting", "invoice", "sister"),
    *("concert", "recipe", "harbour", "violin", "project", "deadline", "holiday", "mountain"),
    *("library", "kitchen", "window", "letter", "doctor", "train", "birthday", "coffee"),
    *("museum", "notebook", "weather", "market", "bridge", "forest"),
)


@dataclass
class Inbound:
    """One message the driver sent to the gateway, and what became of it."""

    channel: Literal["telegram", "webchat"]
    key: str  # Telegram: "chat:message_id" (the stored platform id); web chat: client_id
    label: str  # for reports: the update_id, or the client_id
    text: str
    attempts: int = 0
    acknowledged: bool = False
    redelivered: bool = False


def message_text(marker: str, rng: random.Random, words: int) -> str:
    return f"{marker}: " + " ".join(rng.choice(WORDS) for _ in range(words)) + "."


async def post_until_acknowledged(
    http: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    *,
    accept: frozenset[int],
    headers: dict[str, str] | None = None,
    seconds: float,
    rng: random.Random,
) -> tuple[httpx.Response | None, int]:
    """POST until one of `accept` comes back, as platforms retry a webhook: connection
    errors and other statuses are retried after a short backoff. (response, attempts)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    for attempt in itertools.count(1):
        try:
            response = await http.post(path, json=body, headers=headers)
            if response.status_code in accept:
                return response, attempt
        except httpx.TransportError:
            pass
        if loop.time() > deadline:
            return None, attempt
        await asyncio.sleep(rng.uniform(0.1, 0.4))  # the sender's retry backoff
    raise AssertionError("unreachable")


class Progress:
    """How many messages are done (acknowledged, or given up on)."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Condition()

    async def advance(self) -> None:
        async with self._changed:
            self.count += 1
            self._changed.notify_all()

    async def reached(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.count >= count)


class Traffic:
    """Telegram users posting webhook updates and web chat visitors posting messages,
    each in order, each message retried until acknowledged."""

    def __init__(self, http: httpx.AsyncClient, plan: FaultPlan) -> None:
        self._http = http
        self._plan = plan
        self.sent: list[Inbound] = []
        self.progress = Progress()
        # Senders waiting to send their last message, and the go for it.
        self.at_last_round = Progress()
        self.last_round = asyncio.Event()
        self._update_ids = itertools.count(900_001)
        self._redeliveries: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        plan = self._plan
        users = [
            self._telegram_user(5_100_001 + i, random.Random(f"{plan.seed}:tg:{i}"))
            for i in range(plan.telegram_users)
        ]
        visitors = [
            self._webchat_visitor(i, random.Random(f"{plan.seed}:wc:{i}"))
            for i in range(plan.webchat_visitors)
        ]
        await asyncio.gather(*users, *visitors)

    async def _wait_for_last_round(self) -> None:
        await self.at_last_round.advance()
        await self.last_round.wait()

    async def redeliveries_done(self) -> None:
        await asyncio.gather(*self._redeliveries)

    async def _telegram_user(self, user_id: int, rng: random.Random) -> None:
        headers = {SECRET_HEADER: WEBHOOK_SECRET}
        last = self._plan.messages_per_telegram_user
        for number in range(1, last + 1):
            if number == last:
                await self._wait_for_last_round()
            await asyncio.sleep(rng.uniform(*self._plan.message_gap))  # the person types
            update_id = next(self._update_ids)
            content = message_text(f"tg{user_id}-m{number:03d}", rng, self._plan.words_per_message)
            update = text_update(user_id, content, message_id=number, update_id=update_id)
            sent = Inbound("telegram", f"{user_id}:{number}", f"update {update_id}", content)
            self.sent.append(sent)
            response, sent.attempts = await post_until_acknowledged(
                self._http,
                "/webhooks/telegram",
                update,
                accept=frozenset({200}),
                headers=headers,
                seconds=self._plan.ack_seconds,
                rng=rng,
            )
            sent.acknowledged = response is not None
            await self.progress.advance()
            if sent.acknowledged and rng.random() < self._plan.redelivered_share:
                sent.redelivered = True
                task = asyncio.create_task(self._redeliver(update, headers, rng.uniform(0, 3)))
                self._redeliveries.add(task)

    async def _redeliver(
        self, update: dict[str, Any], headers: dict[str, str], after: float
    ) -> None:
        await asyncio.sleep(after)  # Telegram redelivers some time later
        await post_until_acknowledged(
            self._http,
            "/webhooks/telegram",
            update,
            accept=frozenset({200}),
            headers=headers,
            seconds=self._plan.ack_seconds,
            rng=random.Random(update["update_id"]),
        )

    async def _webchat_visitor(self, index: int, rng: random.Random) -> None:
        response, _ = await post_until_acknowledged(
            self._http,
            "/webchat/sessions",
            {},
            accept=frozenset({201}),
            seconds=self._plan.ack_seconds,
            rng=rng,
        )
        assert response is not None, "no web chat session could be opened"
        headers = {"Authorization": f"Bearer {response.json()['token']}"}
        last = self._plan.messages_per_visitor
        for number in range(1, last + 1):
            if number == last:
                await self._wait_for_last_round()
            await asyncio.sleep(rng.uniform(*self._plan.message_gap))
            client_id = f"wc{index}-{rng.getrandbits(64):016x}"
            content = message_text(f"wc{index}-m{number:03d}", rng, self._plan.words_per_message)
            sent = Inbound("webchat", client_id, client_id, content)
            self.sent.append(sent)
            answer, sent.attempts = await post_until_acknowledged(
                self._http,
                "/webchat/messages",
                {"text": content, "client_id": client_id},
                accept=frozenset({200, 202}),
                headers=headers,
                seconds=self._plan.ack_seconds,
                rng=rng,
            )
            sent.acknowledged = answer is not None
            await self.progress.advance()


# -- the database, as the checks read it -----------------------------------------------------


@dataclass(frozen=True)
class StoredRow:
    conversation: str
    seq: int
    role: str
    channel: str
    text: str
    platform_id: str | None
    reply_to_seq: int | None
    delivery: str | None
    parts_sent: int


@dataclass(frozen=True)
class ChunkRow:
    id: int
    conversation: str
    level: int
    seq_start: int
    seq_end: int
    status: str
    parent_id: int | None
    in_timeline: bool
    facts_extracted: bool


@dataclass(frozen=True)
class Snapshot:
    messages: list[StoredRow]
    chunks: list[ChunkRow]
    owing: list[str]  # conversations whose last user message is past the answered one

    def replies(self) -> list[StoredRow]:
        return [m for m in self.messages if m.reply_to_seq is not None and m.role != "user"]


MESSAGES = text(
    "SELECT CAST(conversation_id AS text) AS conversation, seq, role, channel, text, "
    "platform_message_id AS platform_id, reply_to_seq, delivery, "
    "delivery_parts_sent AS parts_sent FROM messages"
)
CHUNKS = text(
    "SELECT id, CAST(conversation_id AS text) AS conversation, level, seq_start, seq_end, "
    "status, parent_id, in_timeline, facts_extracted FROM chunks"
)
OWING = text("SELECT CAST(id AS text) FROM conversations WHERE last_user_seq > answered_seq")


async def snapshot(engine: AsyncEngine) -> Snapshot:
    async with engine.connect() as connection:
        messages = [StoredRow(**row._mapping) for row in await connection.execute(MESSAGES)]
        chunks = [ChunkRow(**row._mapping) for row in await connection.execute(CHUNKS)]
        owing = list((await connection.scalars(OWING)).all())
    return Snapshot(messages, chunks, owing)


def recorded_sent(row: StoredRow) -> bool:
    """The gateway recorded that the platform took (the first part of) this reply."""
    return row.parts_sent > 0 or row.delivery in ("sent", "delivered", "read")


# -- checks ------------------------------------------------------------------------------------


def lost_and_doubled(sent: Sequence[Inbound], snap: Snapshot) -> tuple[list[str], list[str]]:
    """Acknowledged messages not stored, and messages stored more than once."""
    by_platform_id: Counter[str] = Counter()
    for row in snap.messages:
        if row.role == "user" and row.platform_id is not None:
            key = row.platform_id
            if row.channel == "webchat":
                key = key.rpartition(":")[2]  # "{visitor}:{client_id}"
            by_platform_id[f"{row.channel}/{key}"] += 1
    by_text = Counter(row.text for row in snap.messages if row.role == "user")
    lost = [
        f"{s.channel} {s.label}"
        for s in sent
        if s.acknowledged and by_platform_id[f"{s.channel}/{s.key}"] == 0
    ]
    doubled = []
    for s in sent:
        times = max(by_platform_id[f"{s.channel}/{s.key}"], by_text[s.text])
        if times > 1:
            doubled.append(f"{s.channel} {s.label} stored {times} times")
    return lost, doubled


def unanswered(snap: Snapshot) -> list[str]:
    """User messages with no reply (assistant or event) that answers them."""
    answered_up_to: dict[str, int] = defaultdict(int)
    for reply in snap.replies():
        assert reply.reply_to_seq is not None
        answered_up_to[reply.conversation] = max(
            answered_up_to[reply.conversation], reply.reply_to_seq
        )
    found = [
        f"conversation {m.conversation[:8]} seq {m.seq} ({m.text.partition(':')[0]})"
        for m in snap.messages
        if m.role == "user" and m.seq > answered_up_to[m.conversation]
    ]
    found += [f"conversation {c[:8]} owes a reply" for c in snap.owing]
    return found


def answered_twice(snap: Snapshot) -> list[str]:
    """Turns with more than one reply (replies to the same user seq)."""
    counts = Counter((r.conversation, r.reply_to_seq) for r in snap.replies())
    return [
        f"conversation {c[:8]} seq {seq}: {n} replies" for (c, seq), n in counts.items() if n > 1
    ]


@dataclass
class ArchiveFindings:
    not_ready: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    bad_rollups: list[str] = field(default_factory=list)
    facts_missing: list[str] = field(default_factory=list)
    rollups_due: list[str] = field(default_factory=list)
    per_level: Counter[int] = field(default_factory=Counter)


def check_archive(chunks: Sequence[ChunkRow], limits: MemoryLimits) -> ArchiveFindings:
    found = ArchiveFindings()
    found.per_level = Counter(c.level for c in chunks)
    found.not_ready = [
        f"chunk {c.id} (level {c.level}) {c.status}" for c in chunks if c.status != "ready"
    ]
    found.facts_missing = [
        f"chunk {c.id}"
        for c in chunks
        if c.level == 0 and c.status == "ready" and not c.facts_extracted
    ]
    levels: dict[tuple[str, int], list[ChunkRow]] = defaultdict(list)
    for chunk in chunks:
        levels[(chunk.conversation, chunk.level)].append(chunk)
    for rows in levels.values():
        rows.sort(key=lambda c: (c.seq_start, c.id))
        for a, b in itertools.pairwise(rows):
            if a.seq_end >= b.seq_start:
                found.overlaps.append(
                    f"level {a.level}: chunk {a.id} (seq {a.seq_start}-{a.seq_end}) and "
                    f"chunk {b.id} (seq {b.seq_start}-{b.seq_end})"
                )
    for parent in chunks:
        if parent.level == 0:
            continue
        siblings = levels[(parent.conversation, parent.level - 1)]
        positions = [i for i, c in enumerate(siblings) if c.parent_id == parent.id]
        kids = [siblings[i] for i in positions]
        span = f"chunk {parent.id} (level {parent.level}, seq {parent.seq_start}-{parent.seq_end})"
        if len(kids) < 2:
            found.bad_rollups.append(f"{span} has {len(kids)} children")
        elif positions != list(range(positions[0], positions[0] + len(positions))):
            skipped = [
                siblings[i].id for i in range(positions[0], positions[-1]) if i not in positions
            ]
            found.bad_rollups.append(
                f"{span} is made of chunks {[k.id for k in kids]}, skipping {skipped}"
            )
        elif (kids[0].seq_start, kids[-1].seq_end) != (parent.seq_start, parent.seq_end):
            found.bad_rollups.append(
                f"{span} does not span its children (seq {kids[0].seq_start}-{kids[-1].seq_end})"
            )
    found.rollups_due = rollups_due(chunks, limits)
    return found


def rollups_due(chunks: Sequence[ChunkRow], limits: MemoryLimits) -> list[str]:
    """Levels whose oldest parentless chunks form a run long enough to roll up: a run of
    ready chunks (level 0: swapped into the timeline), oldest first, none skipped."""
    roots: dict[tuple[str, int], list[ChunkRow]] = defaultdict(list)
    for chunk in chunks:
        if chunk.parent_id is None:
            roots[(chunk.conversation, chunk.level)].append(chunk)
    due = []
    for (conversation, level), rows in sorted(roots.items()):
        rows.sort(key=lambda c: c.seq_start)
        run = list(
            itertools.takewhile(
                lambda c: c.status == "ready" and (c.level > 0 or c.in_timeline), rows
            )
        )
        threshold = (
            limits.consolidate_at if level == 0 else limits.rollup_keep + limits.rollup_batch
        )
        if len(run) >= threshold:
            due.append(f"conversation {conversation[:8]} level {level}: {len(run)} ready roots")
    return due


@dataclass
class SendFindings:
    """The fake Telegram's record of sends, against the replies stored."""

    replies: int = 0
    sends: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)  # reply text: extra sends
    never_sent: list[str] = field(default_factory=list)
    not_recorded: list[str] = field(default_factory=list)  # delivery still pending/failed


def check_sends(telegram: FakeTelegram, snap: Snapshot) -> SendFindings:
    replies = [r for r in snap.replies() if r.channel == "telegram"]
    sent = Counter((c.params["chat_id"], c.params["text"]) for c in telegram.sent())
    by_text = Counter(t for _, t in sent.elements())
    found = SendFindings(replies=len(replies), sends=sum(sent.values()))
    found.duplicates = {t: n - 1 for (_, t), n in sent.items() if n > 1}
    found.never_sent = [f"{r.text!r} ({r.delivery})" for r in replies if by_text[r.text] == 0]
    found.not_recorded = [
        f"{r.text!r} ({r.delivery})" for r in snap.replies() if r.delivery not in ("sent", None)
    ]
    return found


# -- the rig -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    at: float
    progress: int  # messages done by then
    target: str
    aimed: bool  # meant for a model call in flight
    landed: bool  # the model call was in flight at the kill
    uncertain_sends: tuple[str, ...] = ()  # serve: parts Telegram took, not recorded

    def brief(self) -> str:
        """`serve@12.3s/40*`: at 12.3 s, 40 messages done; * aimed and landed in a model
        call, ? aimed and missed; ! per part Telegram took that the gateway had not
        recorded (a kill inside a send)."""
        mark = ("*" if self.landed else "?") if self.aimed else ""
        return (
            f"{self.target}@{self.at:.1f}s/{self.progress}{mark}{'!' * len(self.uncertain_sends)}"
        )


@dataclass
class Report:
    plan: FaultPlan
    seconds: dict[str, float]
    settled: bool
    sent: list[Inbound]
    kills: list[Kill]
    lost: list[str]
    stored_twice: list[str]
    unacknowledged: list[str]
    unanswered: list[str]
    answered_twice: list[str]
    archive: ArchiveFindings
    sends: SendFindings
    uncertain_sends: set[str]
    unexpected_exits: list[str]
    failed_starts: list[str]
    model_calls: Counter[str]

    @property
    def unexplained_duplicate_sends(self) -> list[str]:
        return [
            f"{text!r} sent {1 + extra}x"
            for text, extra in self.sends.duplicates.items()
            if text not in self.uncertain_sends
        ]

    def kills_of(self, target: str) -> list[Kill]:
        return [k for k in self.kills if k.target.startswith(target)]

    def render(self) -> str:
        acked = sum(s.acknowledged for s in self.sent)
        retried = sum(s.attempts > 1 for s in self.sent)
        lines = [
            f"fault run, seed {self.plan.seed}: "
            + ", ".join(f"{k} {v:.0f}s" for k, v in self.seconds.items())
            + ("" if self.settled else " (did NOT settle)"),
            f"  messages: {len(self.sent)} sent, {acked} acknowledged, {retried} retried, "
            f"{sum(s.redelivered for s in self.sent)} redelivered",
        ]
        for target in ("serve", "worker", "redis"):
            kills = self.kills_of(target)
            aimed = [k for k in kills if k.aimed]
            lines.append(
                f"  kills of {target}: {len(kills)} ({len(aimed)} aimed, "
                f"{sum(k.landed for k in aimed)} during a model call)"
            )
        lines.append("  timeline: " + " ".join(k.brief() for k in self.kills))
        in_window = [k for k in self.kills if k.uncertain_sends]
        lines += [
            f"  kills inside a send (Telegram took a part, not recorded): {len(in_window)}, "
            f"{len(self.uncertain_sends)} parts",
            f"  Telegram replies {self.sends.replies}, sends {self.sends.sends}, "
            f"duplicate sends {sum(self.sends.duplicates.values())}, "
            f"unexplained by a kill {len(self.unexplained_duplicate_sends)}",
            f"  chunks per level: {dict(sorted(self.archive.per_level.items()))}",
            f"  model calls: {dict(sorted(self.model_calls.items()))}",
            f"  unexpected exits: {len(self.unexpected_exits)}, failed starts: "
            f"{len(self.failed_starts)}",
        ]
        return "\n".join(lines)


class Rig:
    def __init__(
        self,
        *,
        plan: FaultPlan,
        clock: Clock,
        engine: AsyncEngine,
        limits: MemoryLimits,
        redis: RedisServer,
        serve: Child,
        workers: list[Child],
        telegram: FakeTelegram,
        script: ModelScript,
        http: httpx.AsyncClient,
    ) -> None:
        self.plan = plan
        self.clock = clock
        self.engine = engine
        self.limits = limits
        self.redis = redis
        self.serve = serve
        self.workers = workers
        self.telegram = telegram
        self.script = script
        self.http = http
        self.kills: list[Kill] = []
        self.uncertain_sends: set[str] = set()
        self.seconds: dict[str, float] = {}
        self.traffic = Traffic(http, plan)

    @property
    def children(self) -> list[Child]:
        return [self.serve, *self.workers]

    # -- traffic under faults --

    async def drive(self) -> list[Inbound]:
        """Send all traffic while killing serve, workers and Redis; returns what was sent."""
        plan = self.plan
        started = self.clock()
        redis_done = asyncio.Event()
        async with asyncio.timeout(plan.drive_seconds):
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._traffic())
                tasks.create_task(self._kill_serve(self._rng("serve")))
                tasks.create_task(self._kill_workers(self._rng("workers"), redis_done))
                tasks.create_task(self._kill_redis(self._rng("redis"), redis_done))
            await self.traffic.redeliveries_done()
        self.seconds["drive"] = self.clock() - started
        return self.traffic.sent

    def _rng(self, name: str) -> random.Random:
        return random.Random(f"{self.plan.seed}:{name}")

    def _record(self, target: str, *, aimed: bool = False, landed: bool = False) -> Kill:
        return Kill(self.clock(), self.traffic.progress.count, target, aimed, landed)

    async def _traffic(self) -> None:
        started = self.clock()
        await self.traffic.run()
        self.seconds["traffic"] = self.clock() - started

    async def _at(self, moment: int, rng: random.Random) -> None:
        await self.traffic.progress.reached(moment)
        await asyncio.sleep(rng.uniform(*self.plan.kill_delay))  # a random moment near it

    async def _kill_serve(self, rng: random.Random) -> None:
        plan = self.plan
        moments = plan.moments(rng, plan.serve_kills, plan.serve_window)
        for moment, aimed in zip(moments, plan.aims(rng, plan.serve_kills), strict=True):
            await self._at(moment, rng)
            kill = await self._kill(self.serve, ("chat",) if aimed else ())
            # Dead now: what Telegram took that it had not recorded goes out again.
            uncertain = await self._unrecorded_sends()
            new = tuple(sorted(uncertain - self.uncertain_sends))
            self.uncertain_sends |= uncertain
            self.kills.append(replace(kill, uncertain_sends=new))
            await self.serve.start()

    async def _kill_workers(self, rng: random.Random, redis_done: asyncio.Event) -> None:
        plan = self.plan
        moments = plan.moments(rng, plan.worker_kills, plan.worker_window)
        aims: list[tuple[str, ...]] = [("summary",), ("extract",), ("summary",)]
        kinds = itertools.cycle(aims)
        for moment, aimed in zip(moments, plan.aims(rng, plan.worker_kills), strict=True):
            await self._at(moment, rng)
            self.kills.append(
                await self._kill(rng.choice(self.workers), next(kinds) if aimed else ())
            )
            await self._start_workers()
        await redis_done.wait()
        for _ in range(plan.late_worker_kills):
            await asyncio.sleep(rng.uniform(*plan.late_worker_gap))
            self.kills.append(await self._kill(rng.choice(self.workers), ("extract",)))
            await self._start_workers()

    async def _start_workers(self) -> None:
        await asyncio.gather(*(w.start() for w in self.workers if not w.alive))

    async def _kill(self, default: Child, kinds: tuple[str, ...]) -> Kill:
        """Kill `default`; or, aimed (`kinds` given), whichever child makes the next model
        call of `kinds`, while that call is held open (if none comes, `default`)."""
        if not kinds:
            await default.kill()
            return self._record(default.name)
        async with self.script.trap(kinds) as trap:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.plan.trap_seconds):
                    await trap.sprung.wait()
            victim = next((c for c in self.children if c.name == trap.caller), default)
            await victim.kill()
        return self._record(victim.name, aimed=True, landed=trap.caller is not None)

    async def _kill_redis(self, rng: random.Random, done: asyncio.Event) -> None:
        plan = self.plan
        for window in plan.redis_windows:
            (moment,) = plan.moments(rng, 1, window)
            await self._at(moment, rng)
            await self.redis.kill()
            self.kills.append(self._record("redis"))
            await asyncio.sleep(rng.uniform(*plan.redis_down))  # the outage
            await self.redis.start()
        # The last outage, between everyone's last two messages (see FaultPlan).
        await self.traffic.at_last_round.reached(plan.senders)
        with contextlib.suppress(TimeoutError):
            await poll(self._turns_and_summaries_done, until=bool, seconds=15, interval=0.2)
        await self.redis.kill()
        self.kills.append(self._record("redis"))
        self.traffic.last_round.set()
        await asyncio.sleep(rng.uniform(*plan.redis_down))
        await self.redis.start()
        done.set()

    async def _turns_and_summaries_done(self) -> bool:
        snap = await snapshot(self.engine)
        pending = [c for c in snap.chunks if c.level == 0 and c.status != "ready"]
        return not snap.owing and not pending

    async def _unrecorded_sends(self) -> set[str]:
        """Reply texts Telegram took that the (dead) gateway had not recorded as sent."""

        async def in_flight() -> int:  # sends the fake is still answering
            calls = self.telegram.calls_of("sendMessage")
            return sum(not c.params.get("_accepted") for c in calls)

        with contextlib.suppress(TimeoutError):
            await poll(in_flight, until=lambda n: n == 0, seconds=2, interval=0.02)
        snap = await snapshot(self.engine)  # final: the gateway is dead
        taken = {c.params["text"] for c in self.telegram.sent()}  # after: nothing is missed
        recorded = {r.text for r in snap.replies() if r.channel == "telegram" and recorded_sent(r)}
        return taken - recorded

    # -- settling and checking --

    async def settle(self, seconds: float) -> bool:
        """Wait until every turn, delivery and archive job is done; False at the deadline."""
        started = self.clock()
        for child in self.children:
            if not child.alive:
                await child.start()
        try:
            await poll(self._quiet, until=bool, seconds=seconds, interval=0.5)
        except TimeoutError:
            settled = False
        else:
            settled = True
        self.seconds["settle"] = self.clock() - started
        return settled

    async def _quiet(self) -> bool:
        snap = await snapshot(self.engine)
        archive = check_archive(snap.chunks, self.limits)
        sends = check_sends(self.telegram, snap)
        return not (
            unanswered(snap)
            or archive.not_ready
            or archive.facts_missing
            or archive.rollups_due
            or sends.not_recorded
            or sends.never_sent
        )

    async def report(self, sent: list[Inbound], settled: bool) -> Report:
        snap = await snapshot(self.engine)
        lost, doubled = lost_and_doubled(sent, snap)
        return Report(
            plan=self.plan,
            seconds=dict(self.seconds),
            settled=settled,
            sent=sent,
            kills=list(self.kills),
            lost=lost,
            stored_twice=doubled,
            unacknowledged=[f"{s.channel} {s.label}" for s in sent if not s.acknowledged],
            unanswered=unanswered(snap),
            answered_twice=answered_twice(snap),
            archive=check_archive(snap.chunks, self.limits),
            sends=check_sends(self.telegram, snap),
            uncertain_sends=set(self.uncertain_sends),
            unexpected_exits=[e for c in self.children for e in c.unexpected_exits],
            failed_starts=[f"{c.name}: {f}" for c in self.children for f in c.failed_starts],
            model_calls=Counter(self.script.calls),
        )

    def logs(self, lines: int = 30) -> str:
        """What the children logged: warnings and errors counted by event, then the last
        `lines` of them (and of tracebacks) from each log."""
        out = [f"==== redis: killed {self.redis.kills} times"]
        for path in [c.log for c in self.children]:
            if not path.exists():
                continue
            content = path.read_text(errors="replace").splitlines()
            events: Counter[str] = Counter()
            notable = []
            for line in content:
                entry = _log_entry(line)
                level = entry.get("level") if entry is not None else None
                if entry is None and _complaint(line):
                    notable.append(line[:300])  # a traceback's last line, arq's complaints
                    if "Traceback" in line:
                        events["Traceback"] += 1
                elif entry is not None and level in ("warning", "error", "critical"):
                    notable.append(_brief_entry(entry))
                    events[f"{level}: {entry.get('event')}"] += 1
            out.append(f"==== {path.name}: {len(content)} lines; {dict(events.most_common(15))}")
            out += notable[-lines:]
        return "\n".join(out)


def _complaint(line: str) -> bool:
    """A plain line about an error, not inside a (rich) traceback's box."""
    boxed = line.startswith(("│", "╭", "╰"))
    return not boxed and re.search(r"error|exception", line, re.IGNORECASE) is not None


def _brief_entry(entry: dict[str, Any]) -> str:
    """A structlog JSON line in one short line: its exception by its last line only."""
    fields = {k: v for k, v in entry.items() if k not in ("timestamp", "level", "event")}
    error = str(fields.pop("exception", "")).strip().splitlines()
    brief = f"{entry.get('timestamp', '')} {entry.get('level')}: {entry.get('event')} {fields}"
    return (brief + (f" | {error[-1]}" if error else ""))[:400]


def _log_entry(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


@contextlib.asynccontextmanager
async def fault_rig(database_url: str, directory: Path, plan: FaultPlan) -> AsyncIterator[Rig]:
    """Everything up: fake model and Telegram, Redis, `parley serve` and the workers."""
    clock = Clock()
    script = ModelScript()
    data_dir = directory / "data"
    data_dir.mkdir()
    engine = create_engine(database_url)
    port = free_port()
    redis = RedisServer(directory, clock)
    children: list[Child] = []
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(engine.dispose)
        llm = await stack.enter_async_context(fake_model(script))
        telegram = await stack.enter_async_context(fake_platform())
        await redis.start()
        stack.push_async_callback(redis.stop)
        values = gateway_settings(
            data_dir=data_dir,
            database_url=database_url,
            redis_url=redis.url,
            port=port,
            telegram=telegram,
        )
        url = f"http://127.0.0.1:{port}"

        def child(name: str, command: str, health: str | None = None) -> Child:
            env = parley_env(**values, llm_base_url=base_for(llm, name))
            env["PYTHONPATH"] = str(REPO)  # the code beside these tests, whatever is installed
            made = Child(name, command, env, directory, clock, health)
            children.append(made)
            stack.push_async_callback(made.close)
            return made

        serve_child = child("serve", "serve", f"{url}/healthz")
        workers = [child(f"worker{i}", "worker") for i in range(plan.workers)]
        await asyncio.gather(*(c.start() for c in children))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=15))
        yield Rig(
            plan=plan,
            clock=clock,
            engine=engine,
            limits=limits_of(values),
            redis=redis,
            serve=serve_child,
            workers=workers,
            telegram=telegram,
            script=script,
            http=http,
        )
