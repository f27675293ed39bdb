"""What a replica reads of the other replicas' events: per-conversation channels vs one.

    python -m bench.fanout_decode [--conversations N] [--watched W] [--deltas D]
                                  [--rate EVENTS_PER_S] [--redis-url URL] [--json]

Replica 1 (this process, a `Hub` and a `RedisFanout`) streams D deltas into each of N
conversations, round by round at `--rate` events a second. Two listening replicas run as
processes of their own, so each one's CPU is its own, and both have subscribers on the
same W conversations only (as sockets would):

- **new**: the gateway's `Hub` + `RedisFanout`, subscribed to the channels of the W
  conversations it has subscribers for;
- **old** (the baseline, the design before per-conversation channels): one subscription
  that hears every conversation (a pattern over all the channels carries the same
  messages the one channel did), each event decoded by the same `decode` and handed to
  a `Hub` with the same subscribers, as `RedisFanout` did.

At the end replica 1 publishes an `Ended` into each watched conversation: Redis keeps a
publisher's order, so a listener that has it has read everything before it. Reported per
listener: events decoded, events its subscribers got (W x D expected: fewer means the
run dropped some), CPU ms in all and µs per published event, and the old/new ratios;
and replica 1's own CPU per event it published (its hub and fan-out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from bench.memory_support import machine, machine_line
from gateway.events.fanout import RedisFanout, channel_prefix, decode
from gateway.events.hub import DeltaEvent, Ended, Event, Hub, Overflow

DESIGNS = ("new", "old")
OLD_ORIGIN = "the old-design listener"  # publishes nothing: every event is another's
CHILD_SECONDS = 120


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Events a replica decodes: per-conversation channels vs one channel."
    )
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--watched", type=int, default=5, help="conversations with sockets")
    parser.add_argument("--deltas", type=int, default=50, help="deltas per conversation")
    parser.add_argument("--rate", type=float, default=5000.0, help="published events a second")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/2")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--listen", choices=DESIGNS, help=argparse.SUPPRESS)  # as a child
    parser.add_argument("--ids", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


# --- the listening replicas (child processes) -------------------------------------------


async def _deltas_until_ended(queue: asyncio.Queue[Event]) -> int:
    deltas = 0
    while not isinstance(event := await queue.get(), Ended):
        deltas += isinstance(event, DeltaEvent)
    return deltas


Heard = Callable[[list[asyncio.Queue[Event]]], Awaitable[None]]


async def _measure(hub: Hub, watched: list[uuid.UUID], heard: Heard) -> dict[str, Any]:
    """Subscribe to `watched`; once `heard()`, say ready and count what the subscribers
    get until each has its Ended, with this process's CPU meanwhile."""
    with contextlib.ExitStack() as stack:
        queues = [stack.enter_context(hub.subscribe(c)) for c in watched]
        await heard(queues)
        print("ready", flush=True)
        started = time.process_time()
        delivered = sum(await asyncio.gather(*(_deltas_until_ended(q) for q in queues)))
        return {"delivered": delivered, "cpu_seconds": time.process_time() - started}


async def _listen_new(url: str, watched: list[uuid.UUID]) -> dict[str, Any]:
    hub = Hub()
    fanout = RedisFanout(hub, url)
    await fanout.start()

    async def heard(queues: list[asyncio.Queue[Event]]) -> None:
        for queue in queues:  # each gets its catch-up when Redis confirms its channel
            assert isinstance(await asyncio.wait_for(queue.get(), 30), Overflow)

    try:
        result = await _measure(hub, watched, heard)
        return {**result, "decoded": fanout.decoded}
    finally:
        await fanout.close()


async def _listen_old(url: str, watched: list[uuid.UUID]) -> dict[str, Any]:
    """One subscription hearing every conversation, decoded as RedisFanout did."""
    hub, decoded = Hub(), [0]
    redis = Redis.from_url(url)
    pubsub = redis.pubsub()
    reading: list[asyncio.Task[None]] = []

    async def read() -> None:
        async for message in pubsub.listen():
            if message["type"] == "pmessage":
                decoded[0] += 1
                origin, conversation_id, event = decode(message["data"])
                if origin != OLD_ORIGIN:
                    hub.deliver(conversation_id, event)

    async def heard(queues: list[asyncio.Queue[Event]]) -> None:
        await pubsub.psubscribe(channel_prefix(url) + ":*")
        await asyncio.wait_for(pubsub.get_message(timeout=None), 30)  # the confirmation
        reading.append(asyncio.create_task(read()))

    try:
        result = await _measure(hub, watched, heard)
        return {**result, "decoded": decoded[0]}
    finally:
        for task in reading:
            task.cancel()
        await asyncio.gather(*reading, return_exceptions=True)
        await pubsub.aclose()
        await redis.aclose()


async def _child(args: argparse.Namespace) -> None:
    watched = [uuid.UUID(c) for c in args.ids.split(",")]
    listen = _listen_new if args.listen == "new" else _listen_old
    print(json.dumps(await listen(args.redis_url, watched)), flush=True)


# --- replica 1, which streams, and the run (this process) -------------------------------


@contextlib.asynccontextmanager
async def _listener(
    design: str, args: argparse.Namespace, watched: list[uuid.UUID]
) -> AsyncIterator[asyncio.subprocess.Process]:
    ids = ",".join(str(c) for c in watched)
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bench.fanout_decode", "--listen", design, "--ids", ids),
        *("--redis-url", args.redis_url),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"the {design} listener did not start: {line!r}")
        yield child
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


@contextlib.asynccontextmanager
async def _replica_one(url: str) -> AsyncIterator[Hub]:
    hub = Hub()
    fanout = RedisFanout(hub, url)
    await fanout.start()
    try:
        await asyncio.wait_for(fanout.listening.wait(), 30)
        yield hub
    finally:
        await fanout.close()


async def _stream(hub: Hub, args: argparse.Namespace, conversations: list[uuid.UUID]) -> float:
    """A delta into every conversation per round, at `--rate`; then an Ended into each
    watched one. Returns the seconds it took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    for round_ in range(args.deltas):
        for conversation in conversations:
            hub.publish(conversation, DeltaEvent(conversation, f"token {round_} "))
        due = started + (round_ + 1) * len(conversations) / args.rate
        await asyncio.sleep(max(0.0, due - loop.time()))  # the pace of the stream
    for conversation in conversations[: args.watched]:
        hub.publish(conversation, Ended(conversation, "the end of the run"))
    return loop.time() - started


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    conversations = [uuid.uuid4() for _ in range(args.conversations)]
    watched = conversations[: args.watched]
    results: dict[str, Any] = {}
    async with (
        _listener("new", args, watched) as new,
        _listener("old", args, watched) as old,
        _replica_one(args.redis_url) as hub,
    ):
        cpu = time.process_time()
        seconds = await _stream(hub, args, conversations)
        # Replica 1 stays up until both have heard its last events.
        for design, child in (("new", new), ("old", old)):
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), CHILD_SECONDS)
            results[design] = json.loads(line)
        cpu = time.process_time() - cpu
    published = args.conversations * args.deltas + args.watched
    for result in results.values():
        result["cpu_us_per_published"] = result["cpu_seconds"] * 1e6 / published
    new_r, old_r = results["new"], results["old"]
    return {
        "config": {k: getattr(args, k) for k in ("conversations", "watched", "deltas", "rate")},
        "published": published,
        "stream_seconds": round(seconds, 2),
        "expected_delivered": args.watched * args.deltas,
        "designs": results,
        # Replica 1's CPU (the hub and its fan-out publishing) per event it published.
        "publisher_cpu_us_per_published": round(cpu * 1e6 / published, 2),
        "decoded_ratio_old_over_new": old_r["decoded"] / max(new_r["decoded"], 1),
        "cpu_ratio_old_over_new": old_r["cpu_seconds"] / max(new_r["cpu_seconds"], 1e-9),
        "machine": machine(),
    }


def _print(report: dict[str, Any]) -> None:
    config = report["config"]
    print(
        f"{report['published']} events published by replica 1 in {report['stream_seconds']} s: "
        f"{config['conversations']} conversations x {config['deltas']} deltas; replica 2 "
        f"has subscribers on {config['watched']} (expected {report['expected_delivered']} deltas)"
    )
    print(f"  publisher: CPU {report['publisher_cpu_us_per_published']:6.2f} µs per event")
    for design, result in report["designs"].items():
        print(
            f"  {design}: decoded {result['decoded']:>6}, delivered {result['delivered']:>5}, "
            f"CPU {result['cpu_seconds'] * 1000:8.1f} ms = "
            f"{result['cpu_us_per_published']:6.2f} µs per published event"
        )
    print(
        f"  old/new: decoded x{report['decoded_ratio_old_over_new']:.1f}, "
        f"CPU x{report['cpu_ratio_old_over_new']:.1f}"
    )
    print(machine_line(report["machine"]))


def main() -> None:
    args = _arguments()
    if args.listen is not None:
        asyncio.run(_child(args))
        return
    report = asyncio.run(_run(args))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)


if __name__ == "__main__":
    main()
