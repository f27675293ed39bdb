"""Every long-lived resource of a running gateway, built by the app factory and
opened and closed by its lifespan."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.archiving import ArchiveMemory, MemoryJobs, build_jobs, memory_limits
from gateway.clock import Clock, SystemClock
from gateway.commands import Commands
from gateway.connector import Connector, enabled_connectors
from gateway.core import Core
from gateway.delivery import DeliveryLoop, RetryPolicy
from gateway.errors import SchemaOutOfDate
from gateway.hub import Hub
from gateway.jobqueue import EmbeddedQueue, JobQueue
from gateway.linking import Linking
from gateway.llm import LLMProvider, build_provider
from gateway.persona import load_persona
from gateway.policy import AccessPolicy
from gateway.profile_commands import register_profile_commands
from gateway.settings import Settings
from gateway.status import register_status
from gateway.turns import TurnLimits, TurnRunner
from memory.archive import Archive
from memory.db import create_engine, session_factory
from memory.deliveries import Deliveries
from memory.files import private_dir, tighten
from memory.identities import Identities
from memory.leases import Leases
from memory.profile import Profiles
from memory.schema import current_revision, head_revision, migrate
from memory.store import Store

log = structlog.get_logger(__name__)

SHUTDOWN_DEADLINE_SECONDS = 10.0


@dataclass
class Services:
    settings: Settings
    clock: Clock
    engine: AsyncEngine
    store: Store
    hub: Hub
    core: Core
    runner: TurnRunner
    commands: Commands
    archive: Archive
    profiles: Profiles
    queue: JobQueue
    jobs: MemoryJobs
    llm: LLMProvider
    connectors: list[Connector]

    @classmethod
    def build(
        cls, settings: Settings, *, llm: LLMProvider | None = None, clock: Clock | None = None
    ) -> Services:
        """Construct everything; nothing here does I/O."""
        clock = clock or SystemClock()
        engine = create_engine(settings.resolved_database_url)
        sessions = session_factory(engine)
        store = Store(sessions)
        hub = Hub()
        commands = Commands()
        llm = llm or build_provider(settings)
        identities = Identities(sessions)
        deliveries = Deliveries(sessions)
        delivery = DeliveryLoop(
            deliveries=deliveries,
            clock=clock,
            retry=RetryPolicy(
                settings.delivery_max_attempts,
                settings.delivery_retry_base_seconds,
                settings.delivery_retry_max_seconds,
            ),
            uncertain=settings.delivery_uncertain,
        )
        core = Core(
            store=store,
            hub=hub,
            clock=clock,
            default_timezone=settings.default_timezone,
            identities=identities,
            policy=AccessPolicy.from_settings(settings, identities, clock),
            deliveries=deliveries,
            delivery=delivery,
        )
        archive = Archive(sessions, memory_limits(settings))
        profiles = Profiles(sessions)
        queue = _job_queue(settings)
        jobs = build_jobs(
            settings,
            archive=archive,
            store=store,
            profiles=profiles,
            provider=llm,
            enqueue=queue.enqueue,
            clock=clock,
            leases=Leases(sessions, clock.now),
        )
        if isinstance(queue, EmbeddedQueue):
            queue.serve(jobs.run, jobs.sweep)
        runner = TurnRunner(
            store=store,
            llm=llm,
            hub=hub,
            clock=clock,
            persona=load_persona(settings.persona_file),
            limits=TurnLimits(settings.llm_context_tokens, settings.llm_max_reply_tokens),
            outbox=core,
            commands=commands,
            memory=ArchiveMemory(archive, profiles, queue, clock, settings.data_dir / "archive"),
            presence=core.working,
        )
        Linking(identities=identities, runner=runner, clock=clock).register(commands)
        register_status(commands, archive, deliveries, profiles)
        register_profile_commands(commands, store, profiles, clock)
        connectors = enabled_connectors(core, settings)
        core.attach(runner, {connector.channel: connector for connector in connectors})
        return cls(
            settings=settings,
            clock=clock,
            engine=engine,
            store=store,
            hub=hub,
            core=core,
            runner=runner,
            commands=commands,
            archive=archive,
            profiles=profiles,
            queue=queue,
            jobs=jobs,
            llm=llm,
            connectors=connectors,
        )

    async def open(self) -> None:
        # The data dir is Parley's own (database, key, transcripts): its owner's only.
        tighten(private_dir(self.settings.data_dir))
        await prepare_schema(self.engine, migrate_embedded=self.settings.is_sqlite)
        await self.queue.start()
        for connector in self.connectors:
            await connector.start()
        await self.core.resume()
        log.info(
            "gateway ready",
            database=self.engine.dialect.name,
            llm=self.llm.name,
            connectors=[connector.channel for connector in self.connectors],
        )

    async def close(self) -> None:
        # The HTTP server has stopped taking requests. Let running turns finish and
        # their replies go out, then stop the connectors (polling intake, platform
        # clients); anything still unanswered or unsent is picked up on the next start.
        await self.runner.close(SHUTDOWN_DEADLINE_SECONDS)
        await self.core.close_delivery(SHUTDOWN_DEADLINE_SECONDS)
        for connector in reversed(self.connectors):
            await connector.stop()
        await self.queue.close()
        await self.llm.aclose()
        await self.engine.dispose()


def _job_queue(settings: Settings) -> JobQueue:
    if settings.redis_url:
        from gateway.arq_queue import ArqQueue  # arq only when Redis is configured

        return ArqQueue(settings.redis_url, key_epoch=settings.job_lease_seconds)
    return EmbeddedQueue(
        concurrency=settings.embedded_job_concurrency, sweep_every=settings.sweep_interval_seconds
    )


async def prepare_schema(engine: AsyncEngine, *, migrate_embedded: bool) -> None:
    """Migrate an embedded SQLite database; refuse a server database that is behind."""
    if migrate_embedded:
        await migrate(engine)
        return
    current, head = await current_revision(engine), head_revision()
    if current != head:
        raise SchemaOutOfDate(current, head)
