"""Durable delivery: every stored reply reaches its platform, in order, exactly once
per part, or is marked failed with the platform's reason.

Replies are already stored (delivery pending) when they get here. Each chat has one
lane: a queue worked by one task, so replies and the parts of a split reply arrive in
order. A part that fails is retried with exponential backoff (a platform's
`retry_after` wins); each part the platform took is recorded before the next is sent,
so a retry, or a restart after a crash, resumes where it stopped. A connector
without a length limit (web chat, whose clients read the database) is called inline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import timedelta

import structlog

from gateway.backoff import full_jitter, server_wait
from gateway.channels.pacing import Pacer, Pacing
from gateway.channels.port import Connector
from gateway.channels.split import split_text
from gateway.clock import Clock
from gateway.envelopes import ChatRef, Outbound
from gateway.errors import DeliveryError, Undeliverable
from gateway.metrics import Metrics
from gateway.replicas.lease_keeper import Fence, Unshared, hold
from gateway.settings import UncertainParts
from gateway.tasks import finish_or_cancel
from memory.storage.deliveries import Deliveries, DeliveryMoved, DeliveryState, NotPending
from memory.storage.leases import Leases
from memory.storage.models import Delivery

log = structlog.get_logger(__name__)

# Preview texts remembered for a finishing edit that may be skipped (a few per chat).
_PREVIEWS_KEPT = 1000

# Told of a reply whose delivery moved on (sent, failed for good, or pending again).
Announce = Callable[[DeliveryMoved], None]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int
    base_seconds: float
    max_seconds: float

    def backoff(self, failures: int) -> float:
        return full_jitter(failures, self.base_seconds, self.max_seconds)


def lane_lease(lane: Hashable) -> str:
    """The name of the lease that gives a chat's lane to one replica."""
    return f"lane:{lane}"


@dataclass(frozen=True, slots=True)
class _Job:
    outbound: Outbound
    sender: Connector
    # Stored just now by this process and never tried, with no preview to replace:
    # where its delivery stands is known without reading it.
    fresh: bool = False


class DeliveryLoop:
    def __init__(
        self,
        *,
        deliveries: Deliveries,
        clock: Clock,
        retry: RetryPolicy,
        uncertain: UncertainParts = UncertainParts.RESEND,
        pacer: Pacing | None = None,
        metrics: Metrics | None = None,
        lanes: Leases | None = None,
        lane_ttl: timedelta = timedelta(seconds=30),
        announce: Announce | None = None,
    ) -> None:
        self._metrics = metrics or Metrics()
        self._announce = announce
        # With leases, a chat's lane is worked by one replica at a time (None: this
        # process is the only one).
        self._lane_leases = lanes
        self._lane_ttl = lane_ttl
        self._queued: set[int] = set()
        self._deliveries = deliveries
        self._uncertain = uncertain
        self._clock = clock
        self._retry = retry
        self._pacer = pacer or Pacer()
        self._lanes: dict[Hashable, deque[_Job]] = {}
        self._workers: dict[Hashable, asyncio.Task[None]] = {}
        # Lanes with a request to the platform in flight: closing lets those finish,
        # so a part the platform took is recorded and never sent twice.
        self._sending: set[Hashable] = set()
        self._closing = False
        # What each preview message last showed (by platform id): a first part that
        # reads the same needs no finishing edit. In this process only, and bounded.
        self._previewed: OrderedDict[str, str] = OrderedDict()

    async def submit(self, outbound: Outbound, sender: Connector, *, fresh: bool = False) -> None:
        """Deliver a stored, pending reply; returns once it is queued (or sent inline).
        `fresh`: stored just now by this process, never tried, and shown by no preview
        (its state is not read; marking its first part as being sent checks it)."""
        if sender.capabilities.max_length is None:
            await self._inline(outbound, sender)
            return
        if self._closing or outbound.message_id in self._queued:
            return  # still pending in the database: the next start delivers it
        self._queued.add(outbound.message_id)
        lane = (outbound.channel, outbound.group_id or outbound.external_user_id)
        self._lanes.setdefault(lane, deque()).append(_Job(outbound, sender, fresh))
        if lane not in self._workers:
            self._workers[lane] = asyncio.create_task(self._work(lane), name=f"deliver:{lane}")

    def previewed(self, platform_id: str, text: str) -> None:
        """A preview message shows `text` as it stops being edited."""
        self._previewed[platform_id] = text
        if len(self._previewed) > _PREVIEWS_KEPT:
            self._previewed.popitem(last=False)

    async def penalty(self, sender: Connector, chat: ChatRef, seconds: float) -> None:
        """The platform asked for `seconds` of quiet in `chat` (a preview met a 429):
        nothing goes out there meanwhile, the reply's parts included."""
        where = Outbound(0, chat.channel, chat.external_user_id, "", group_id=chat.group_id)
        await self._pacer.hold(sender.pacing(where), seconds)

    @property
    def busy(self) -> bool:
        """Whether a lane is being worked (for tests and benchmarks)."""
        return bool(self._workers)

    async def close(self, deadline: float) -> None:
        """Stop sending: a request in flight may finish within `deadline` s; the rest
        stays pending in the database and goes out on the next start."""
        self._closing = True
        for lane, worker in self._workers.items():
            if lane not in self._sending:
                worker.cancel()
        await finish_or_cancel(list(self._workers.values()), deadline)
        await self._pacer.aclose()

    async def _inline(self, outbound: Outbound, sender: Connector) -> None:
        try:
            await sender.send(outbound)
        except DeliveryError as exc:
            log.warning("delivery failed", message_id=outbound.message_id, error=exc.reason)
            moved = await self._deliveries.attempt_failed(
                outbound.message_id, exc.reason, final=True
            )
        else:
            moved = await self._deliveries.sent(outbound.message_id)
        self.announce(moved)

    async def _work(self, lane: Hashable) -> None:
        queue = self._lanes[lane]
        mine = False
        try:
            async with self._lane(lane) as lease:
                # Not ours (None), or lost: another replica works this chat's lane. What
                # is queued here stays pending in the database, and a sweep or the
                # lane's new holder sends it.
                while lease is not None and lease.still_held() and queue:
                    job = queue[0]
                    try:
                        await self._deliver(lane, job, lease)
                    except Exception:
                        # A bug must not stall the lane: the reply stays pending and is
                        # tried again by a later sweep or start.
                        log.exception("delivery crashed", message_id=job.outbound.message_id)
                    queue.popleft()
                    self._queued.discard(job.outbound.message_id)
                mine = lease is not None and lease.still_held()
        finally:
            # Left over (not ours, or closing): pending in the database, not lost.
            del self._workers[lane]
            del self._lanes[lane]
            leftover = list(queue)
            self._queued.difference_update(job.outbound.message_id for job in leftover)
        if mine:  # queued while the lane's lease was being released: another round
            for job in leftover:
                await self.submit(job.outbound, job.sender)

    def _lane(self, lane: Hashable) -> AbstractAsyncContextManager[Fence | None]:
        """The lane's lease while this process works it (None: another replica does)."""
        if self._lane_leases is None:
            return contextlib.nullcontext(Unshared())
        return hold(self._lane_leases, lane_lease(lane), self._lane_ttl)

    async def _deliver(self, lane: Hashable, job: _Job, lease: Fence) -> None:
        outbound, sender = job.outbound, job.sender
        caps = sender.capabilities
        chat = outbound.group_id or outbound.external_user_id
        if job.fresh:
            state: DeliveryState | None = DeliveryState(outbound.message_id, Delivery.PENDING, 0, 0)
        else:
            state = await self._deliveries.state(
                outbound.message_id, preview_in=chat if caps.edits else None
            )
        if state is None or state.delivery is not Delivery.PENDING:
            return  # delivered meanwhile, or deleted
        assert caps.max_length is not None  # checked in submit()
        parts = split_text(outbound.text, caps.max_length, caps.measure) or [outbound.text]
        failures = state.attempts
        start = state.parts_sent
        if state.uncertain_part is not None:
            start += await self._settle_uncertain(outbound, state.uncertain_part)
        moved = None  # where the last part's write moved the reply
        for index in range(start, len(parts)):
            part = replace(outbound, text=parts[index], part=index, parts=len(parts))
            if index == 0:
                part = replace(part, replaces=state.preview)
            while True:
                await self._pacer.wait(sender.pacing(part))
                if self._closing:
                    return  # still pending: the next start goes on from this part
                if not lease.still_held():
                    # This replica stalled and another took the lane: sending on would
                    # interleave our parts with its. Still pending: it goes on from here.
                    log.warning(
                        "lost a delivery lane mid-reply", message_id=part.message_id, part=index
                    )
                    return
                self._sending.add(lane)
                try:
                    failure = await self._send_part(sender, part)
                except NotPending:
                    # Sent, failed or deleted meanwhile, or gone on from elsewhere
                    # (before this part went out, or while it did): as the database
                    # says; what is left, a sweep or the lane's holder sends.
                    log.info(
                        "a reply moved on without this sender",
                        message_id=part.message_id,
                        part=index,
                    )
                    return
                finally:
                    self._sending.discard(lane)
                if not isinstance(failure, DeliveryError):
                    moved = failure
                    break
                failures += 1
                if isinstance(failure, Undeliverable) or failures >= self._retry.max_attempts:
                    await self._give_up(outbound, failure.reason)
                    return
                await self._retry_later(sender, part, failure, failures)
        if start >= len(parts):  # all went out before: a restart settled the last one
            moved = await self._deliveries.sent(outbound.message_id)
        self.announce(moved)

    def announce(self, moved: DeliveryMoved | None) -> None:
        """Say that a reply's delivery moved on (None: nothing moved); a failure to say
        it costs only that."""
        if self._announce is None or moved is None:
            return
        try:
            self._announce(moved)
        except Exception:
            log.exception("could not announce a delivery", message_id=moved.message_id)

    async def _settle_uncertain(self, outbound: Outbound, part: int) -> int:
        """How many parts to skip for one the last process may or may not have sent."""
        skip = self._uncertain is UncertainParts.SKIP
        log.warning(
            "a reply part may or may not have been sent before a restart",
            message_id=outbound.message_id,
            part=part,
            policy=self._uncertain.value,
        )
        await self._deliveries.uncertain(outbound.message_id, part, skip=skip)
        return 1 if skip else 0

    async def _send_part(
        self, sender: Connector, part: Outbound
    ) -> DeliveryError | DeliveryMoved | None:
        """Send one part and record that the platform took it (the last: the reply is
        sent, in the same write, and where it moved); else why it did not.

        The only moment a crash leaves a part in doubt is between the platform taking it
        and `part_sent` committing: nothing else happens in between. A part marked as
        being sent and never settled is found at the next start (`_settle_uncertain`).
        """
        await self._deliveries.sending(part.message_id, part.part)
        if part.replaces is not None and self._previewed.pop(part.replaces, None) == part.text:
            platform_id: str | None = part.replaces  # the preview shows it already
        else:
            try:
                platform_id = await sender.send(part)
            except DeliveryError as exc:
                return exc
        self._metrics.deliveries.labels(part.channel, "sent").inc()
        return await self._deliveries.part_sent(
            part.message_id,
            part.part,
            part.channel,
            platform_id,
            now=self._clock.now(),
            last=part.part == part.parts - 1,
            preview=part.replaces,
        )

    async def _retry_later(
        self, sender: Connector, part: Outbound, failure: DeliveryError, failures: int
    ) -> None:
        self._metrics.deliveries.labels(part.channel, "retried").inc()
        await self._deliveries.attempt_failed(part.message_id, failure.reason, final=False)
        delay = server_wait(failure.retry_after)
        wait = delay if delay is not None else self._retry.backoff(failures)
        log.info(
            "delivery will be retried",
            message_id=part.message_id,
            part=part.part,
            seconds=wait,
            error=failure.reason,
        )
        if delay is None:
            await asyncio.sleep(wait)
        else:
            # The platform's limit: nothing else for this chat or bot goes out meanwhile.
            await self._pacer.hold(sender.pacing(part), delay)

    async def _give_up(self, outbound: Outbound, reason: str) -> None:
        log.warning("delivery failed", message_id=outbound.message_id, error=reason)
        self._metrics.deliveries.labels(outbound.channel, "failed").inc()
        self.announce(
            await self._deliveries.attempt_failed(outbound.message_id, reason, final=True)
        )
