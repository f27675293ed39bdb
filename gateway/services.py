"""Every long-lived resource of a running gateway, built by the app factory and
opened and closed by its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.channels.delivery import Announce, DeliveryLoop, RetryPolicy
from gateway.channels.fetching import Fetcher
from gateway.channels.outbox import Outbox
from gateway.channels.pacing import Pacing
from gateway.channels.port import Connector
from gateway.channels.registry import enabled_connectors
from gateway.clock import Clock, SystemClock
from gateway.commands.help import HelpCommand
from gateway.commands.linking import LinkCommands
from gateway.commands.profile import ProfileCommands
from gateway.commands.registry import Commands
from gateway.commands.reminders import ReminderCommands
from gateway.commands.rights import RightsCommands
from gateway.commands.status import StatusCommand
from gateway.events.hub import DeliveryChanged, Hub
from gateway.inbox.core import Core
from gateway.inbox.policy import AccessPolicy
from gateway.jobs.memory_jobs import ArchiveMemory, MemoryJobs, build_jobs
from gateway.jobs.queue import EmbeddedQueue, JobQueue
from gateway.llm import LLMProvider, build_transcriber
from gateway.metrics import Metrics
from gateway.operations import Erasing, Linking, Operations
from gateway.reminders.firing import Firings
from gateway.reminders.planner import Planner
from gateway.reminders.times import QuietHours
from gateway.reminders.tools import ReminderTools
from gateway.replicas.rate_limits import RateLimits
from gateway.replicas.sweeps import sweep_forever
from gateway.secrets import require_shared_key
from gateway.settings import Settings
from gateway.turns.answering import TurnLimits
from gateway.turns.budget import Budgets, DailyCaps
from gateway.turns.file_tools import FileTools
from gateway.turns.leases import ConversationLeases
from gateway.turns.persona import load_persona
from gateway.turns.recall_tools import RecallTools
from gateway.turns.runner import TurnRunner
from gateway.turns.slots import Arrivals
from gateway.turns.tools import Toolbox
from gateway.wiring import archive_dir, model_provider, open_stores, replica_name
from memory.archive.archive import Archive
from memory.profile.profiles import Profiles
from memory.recall import Recall
from memory.storage.deliveries import DeliveryMoved
from memory.storage.files import private_dir, tighten
from memory.storage.leases import Leases
from memory.storage.migrate import SchemaOutOfDate
from memory.storage.migrate import prepare as prepare_schema
from memory.storage.repositories import Repositories

# How long a file uploaded for a message waits for it (web chat).
UNSENT_UPLOADS_KEPT = timedelta(days=1)

if TYPE_CHECKING:
    from gateway.events.fanout import RedisFanout

log = structlog.get_logger(__name__)


@dataclass
class Services:
    settings: Settings
    clock: Clock
    engine: AsyncEngine
    repos: Repositories
    hub: Hub
    core: Core
    outbox: Outbox
    runner: TurnRunner
    commands: Commands
    archive: Archive
    profiles: Profiles
    queue: JobQueue
    jobs: MemoryJobs
    llm: LLMProvider
    connectors: list[Connector]
    metrics: Metrics
    # What REST and the dashboard ask for, one application service per job.
    operations: Operations
    # Events to and from the other replicas (with Redis only).
    fanout: RedisFanout | None
    # Reminders and follow-ups coming due, fired as turns.
    firings: Firings
    # How often a client may do something (in Redis, for every replica, when configured).
    rate_limits: RateLimits
    # Files platforms hold for messages, fetched after the messages are stored.
    fetcher: Fetcher

    @classmethod
    def build(
        cls, settings: Settings, *, llm: LLMProvider | None = None, clock: Clock | None = None
    ) -> Services:
        """Construct everything, each part once its parts exist; nothing here does I/O.

        The order is the dependency order: connectors, then the outbox that sends
        through them, the turn runner that fills the outbox, and the core that starts
        turns. Connectors learn of the core when the lifespan starts them. One function,
        long as it is: the whole wiring in one place, read top to bottom."""
        require_shared_key(settings)
        clock = clock or SystemClock()
        stores = open_stores(settings, clock, holder=replica_name(settings))
        engine, repos = stores.engine, stores.repos
        archive, profiles = stores.archive, stores.profiles
        metrics = Metrics()
        llm = llm or model_provider(settings, metrics)
        # Turns and background jobs wait for a pause in arriving messages.
        arrivals = Arrivals()
        queue = _job_queue(settings, arrivals)
        jobs = build_jobs(
            settings,
            archive=archive,
            repos=repos,
            profiles=profiles,
            provider=llm,
            enqueue=queue.enqueue,
            clock=clock,
        )
        # Turns and delivery lanes are leased only where replicas can share the
        # database; an embedded SQLite file has one process, and a lease written per
        # turn would cost it a third of its turn throughput at concurrency 8.
        shared_leases = None if settings.is_sqlite else repos.leases
        connectors = enabled_connectors(settings)
        hub, commands = Hub(), Commands()
        delivery = _delivery_loop(
            settings, repos, clock, metrics, shared_leases, partial(_announce, hub)
        )
        outbox = Outbox(
            connectors,
            repos,
            delivery,
            stream_interval=settings.stream_interval_ms / 1000,
            metrics=metrics,
        )
        fetcher = Fetcher(
            connectors,
            repos.attachments,
            clock,
            max_bytes=settings.media_max_bytes,
            metrics=metrics,
            transcriber=build_transcriber(settings),
        )
        planner = Planner(repos.schedules, clock, follow_ups_per_day=settings.follow_ups_per_day)
        budgets = Budgets(
            DailyCaps(settings.daily_tokens_per_person, settings.daily_tokens_per_group),
            repos.usage,
        )
        runner = TurnRunner(
            messages=repos.messages,
            conversations=repos.conversations,
            llm=llm,
            hub=hub,
            clock=clock,
            persona=load_persona(settings.persona_file),
            limits=TurnLimits(
                settings.llm_context_tokens,
                settings.llm_max_reply_tokens,
                # A provider whose model calls no tools (offline): its turns are
                # neither offered them nor told of them.
                settings.llm_max_tool_calls if llm.offers_tools else 0,
                settings.media_images_in_prompt,
            ),
            outbox=outbox,
            leases=ConversationLeases(
                shared_leases, timedelta(seconds=settings.turn_lease_seconds), metrics
            ),
            commands=commands,
            memory=ArchiveMemory(archive, profiles, queue.enqueue, clock, archive_dir(settings)),
            presence=outbox.working,
            concurrency=settings.turn_concurrency,
            arrivals=arrivals,
            metrics=metrics,
            recall=Toolbox(
                (
                    RecallTools(Recall(archive, repos.search, profiles)),
                    ReminderTools(planner),
                    FileTools(repos.attachments),
                ),
                repos.lookups,
                clock,
            ),
            images=repos.attachments,
            budgets=budgets,
            files=fetcher,
            files_wait=settings.media_wait_seconds,
        )
        firings = Firings(
            schedules=repos.schedules,
            messages=repos.messages,
            turns=runner,
            hub=hub,
            clock=clock,
            metrics=metrics,
            channels={connector.channel: connector.capabilities for connector in connectors},
            grace=timedelta(minutes=settings.reminder_grace_minutes),
            quiet=QuietHours.parse(settings.quiet_hours),
            follow_ups_per_day=settings.follow_ups_per_day,
        )
        linking = Linking(links=repos.links, runner=runner, clock=clock)
        erasing = Erasing(
            erasure=repos.erasure,
            directory=repos.directory,
            linking=linking,
            hub=hub,
            clock=clock,
            forget=runner.forget,
        )
        # Every family of chat commands, one entry each; `/help` lists what is here.
        commands.register(
            HelpCommand(commands),
            StatusCommand(
                archive,
                repos.deliveries,
                profiles,
                repos.lookups,
                repos.messages,
                budgets=budgets,
                clock=clock,
            ),
            ProfileCommands(repos.conversations, profiles, clock),
            LinkCommands(
                linking=linking,
                links=repos.links,
                identities=repos.identities,
                conversations=repos.conversations,
                clock=clock,
            ),
            RightsCommands(
                rights=repos.rights,
                conversations=repos.conversations,
                erasing=erasing,
                outbox=outbox,
                clock=clock,
                public_url=settings.public_url,
            ),
            ReminderCommands(planner, repos.conversations, repos.directory),
        )
        rate_limits = RateLimits(settings.redis_url)
        core = Core(
            repos=repos,
            rate_limits=rate_limits,
            hub=hub,
            clock=clock,
            default_timezone=settings.default_timezone,
            policy=AccessPolicy.from_settings(settings, repos.pairings, clock),
            runner=runner,
            outbox=outbox,
            metrics=metrics,
            leader_ttl=timedelta(seconds=settings.turn_lease_seconds),
            replicas=shared_leases is not None,
            fetcher=fetcher,
        )
        return cls(
            settings=settings,
            clock=clock,
            engine=engine,
            repos=repos,
            hub=hub,
            core=core,
            outbox=outbox,
            runner=runner,
            commands=commands,
            archive=archive,
            profiles=profiles,
            queue=queue,
            jobs=jobs,
            llm=llm,
            connectors=connectors,
            metrics=metrics,
            operations=Operations.build(
                settings,
                stores,
                clock,
                core=core,
                outbox=outbox,
                connectors=connectors,
                hub=hub,
                llm=llm,
                queue=queue,
                metrics=metrics,
                linking=linking,
                erasing=erasing,
                planner=planner,
            ),
            fanout=_fanout(settings, hub),
            firings=firings,
            rate_limits=rate_limits,
            fetcher=fetcher,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Open every resource, in order, each registered for release as soon as it is
        open: a failure part-way (a connector whose start raises) releases exactly what
        was started. Shutdown runs the stages top to bottom under one deadline
        (PARLEY_SHUTDOWN_SECONDS); a stage that fails is logged and the rest still run.
        """
        async with contextlib.AsyncExitStack() as stack:
            # Registered first, released last.
            stack.push_async_callback(self._stage, "engine", self.engine.dispose)
            stack.push_async_callback(self._stage, "model client", self.llm.aclose)
            stack.push_async_callback(self._stage, "rate limits", self.rate_limits.aclose)
            stack.enter_context(self.metrics.gc_pauses.watching())
            # The data dir is Parley's own (database, key, transcripts): its owner's only.
            tighten(private_dir(self.settings.data_dir))
            try:
                await prepare_schema(self.engine, migrate_embedded=self.settings.is_sqlite)
            except SchemaOutOfDate as exc:
                log.error("cannot start", reason=str(exc))
                raise
            await self.queue.start(self.jobs)
            stack.push_async_callback(self._stage, "jobs", self.queue.close)
            if self.fanout is not None:
                await self.fanout.start()
                stack.push_async_callback(self._stage, "replica events", self.fanout.close)
            for connector in self.connectors:
                await connector.start(self.core)
                stack.push_async_callback(self._stage, connector.channel, connector.stop)
            deadline = _Deadline(self.settings.shutdown_seconds)
            stack.push_async_callback(
                self._stage, "delivery", lambda: self.outbox.close(deadline.left())
            )
            stack.push_async_callback(
                self._stage, "turns", lambda: self.runner.close(deadline.left())
            )
            stack.callback(deadline.start)  # the HTTP server has stopped taking requests
            await self._resume_owed()
            every = self.settings.sweep_interval_seconds
            for name, sweep, interval, at_once in (
                ("turns", self._resume_owed, every, False),
                ("reminders", self.firings.sweep, self.settings.reminder_sweep_seconds, True),
                ("files", self.fetcher.sweep, every, True),
                ("uploads", self._drop_unsent_uploads, every, True),
            ):
                task = asyncio.create_task(
                    sweep_forever(
                        sweep, interval, name=name, leases=self.repos.leases, at_once=at_once
                    ),
                    name=f"{name}-sweep",
                )
                stack.push_async_callback(self._stage, f"{name} sweep", partial(_cancel, task))
            stack.push_async_callback(self._stage, "file fetches", self.fetcher.close)
            log.info(
                "gateway ready",
                database=self.engine.dialect.name,
                llm=self.llm.name,
                connectors=[connector.channel for connector in self.connectors],
            )
            yield

    async def _drop_unsent_uploads(self) -> None:
        """Files uploaded for a message that never came are not kept past a day."""
        await self.repos.attachments.drop_unsent(self.clock.now() - UNSENT_UPLOADS_KEPT)

    async def _resume_owed(self) -> None:
        """The turns owed anywhere, and the replies still to send: a dead replica's work
        is taken over once its leases lapse."""
        await self.core.resume()
        await self.outbox.resume()

    async def _stage(self, name: str, close: Callable[[], Awaitable[object]]) -> None:
        try:
            await close()
        except Exception:
            log.exception("shutdown stage failed; going on with the next", stage=name)


class _Deadline:
    """One shutdown budget shared by the stages that wait (turns, then delivery)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._end: float | None = None

    def start(self) -> None:
        self._end = time.monotonic() + self._seconds

    def left(self) -> float:
        if self._end is None:
            return self._seconds
        return max(0.0, self._end - time.monotonic())


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _delivery_loop(
    settings: Settings,
    repos: Repositories,
    clock: Clock,
    metrics: Metrics,
    lanes: Leases | None,
    announce: Announce,
) -> DeliveryLoop:
    retry = RetryPolicy(
        settings.delivery_max_attempts,
        settings.delivery_retry_base_seconds,
        settings.delivery_retry_max_seconds,
    )
    return DeliveryLoop(
        deliveries=repos.deliveries,
        clock=clock,
        retry=retry,
        uncertain=settings.delivery_uncertain,
        pacer=_shared_pacer(settings.redis_url) if settings.redis_url else None,
        metrics=metrics,
        lanes=lanes,
        lane_ttl=timedelta(seconds=settings.turn_lease_seconds),
        announce=announce,
    )


def _announce(hub: Hub, moved: DeliveryMoved) -> None:
    """A reply's delivery moved on: whoever shows it (the dashboard) reads it again."""
    hub.publish(moved.conversation_id, DeliveryChanged(moved.conversation_id, moved.seq))


def _shared_pacer(redis_url: str) -> Pacing:
    from gateway.channels.shared_pacing import RedisPacer  # redis only when configured

    return RedisPacer(redis_url)


def _fanout(settings: Settings, hub: Hub) -> RedisFanout | None:
    if not settings.redis_url:
        return None
    from gateway.events.fanout import RedisFanout  # redis only when it is configured

    return RedisFanout(hub, settings.redis_url)


def _job_queue(settings: Settings, arrivals: Arrivals) -> JobQueue:
    if settings.redis_url:
        from gateway.jobs.arq_worker import ArqQueue  # arq only when Redis is configured

        return ArqQueue(settings.redis_url, key_epoch=settings.job_lease_seconds)
    return EmbeddedQueue(
        concurrency=settings.embedded_job_concurrency,
        sweep_every=settings.sweep_interval_seconds,
        pause=arrivals.pause,
    )
