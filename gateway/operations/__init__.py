"""What is done whichever way it is asked for (REST, the dashboard, chat commands),
one application service per job. Routes depend on these, never on repositories; a
service says what went wrong with an exception of `gateway.errors` (or its own, such
as a stale profile revision), and the HTTP edge maps it to a problem in one place.

`Operations` groups them as the composition (`gateway.services`) builds them, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.channels.outbox import Outbox
from gateway.channels.port import Connector
from gateway.clock import Clock
from gateway.events.hub import Hub
from gateway.inbox.core import Core
from gateway.jobs.queue import JobQueue
from gateway.llm import LLMProvider
from gateway.metrics import Metrics
from gateway.operations.chunks import Chunks
from gateway.operations.erasing import Erasing
from gateway.operations.export_links import ExportLinks
from gateway.operations.health import Health
from gateway.operations.idempotency import Idempotency
from gateway.operations.linking import Linking
from gateway.operations.operator_messages import OperatorMessages
from gateway.operations.overview import Overview
from gateway.operations.pairings import PairingRequests
from gateway.operations.people import People
from gateway.operations.portability import Portability
from gateway.operations.profiles import PersonProfiles
from gateway.operations.reminders import PersonReminders
from gateway.operations.retries import Retries
from gateway.operations.sessions import Sessions
from gateway.operations.usage import UsageReports
from gateway.reminders.planner import Planner
from gateway.settings import Settings
from gateway.text import clean
from gateway.wiring import Stores, archive_dir
from memory.portable.export import Exports
from memory.portable.imports import Imports

__all__ = [
    "Chunks",
    "Erasing",
    "ExportLinks",
    "Health",
    "Idempotency",
    "Linking",
    "Operations",
    "OperatorMessages",
    "Overview",
    "PairingRequests",
    "People",
    "PersonProfiles",
    "PersonReminders",
    "Portability",
    "Retries",
    "Sessions",
    "UsageReports",
]


@dataclass(frozen=True, slots=True)
class Operations:
    sessions: Sessions  # conversations: found, read, searched, renamed
    people: People  # the directory; merging, unlinking
    profiles: PersonProfiles  # a person's profile, its edits and history
    chunks: Chunks  # an archive chunk opened; its summary written again
    pairings: PairingRequests  # access requests approved or rejected
    retries: Retries  # memory jobs and failed deliveries, run again
    messages: OperatorMessages  # an operator's message into a conversation
    erasing: Erasing  # a conversation deleted, a person erased
    portability: Portability  # a person's export and its import
    export_links: ExportLinks  # a person's one-time download link
    overview: Overview  # the stats page
    idempotency: Idempotency  # a request sent twice carried out once
    health: Health  # readiness and metrics
    reminders: PersonReminders  # a person's reminders and follow-ups
    usage: UsageReports  # tokens and cost per day, person and model

    @classmethod
    def build(
        cls,
        settings: Settings,
        stores: Stores,
        clock: Clock,
        *,
        core: Core,
        outbox: Outbox,
        connectors: list[Connector],
        hub: Hub,
        llm: LLMProvider,
        queue: JobQueue,
        metrics: Metrics,
        linking: Linking,
        erasing: Erasing,
        planner: Planner,
    ) -> Operations:
        """Each application service with only the parts its job needs."""
        repos, archive, profiles = stores.repos, stores.archive, stores.profiles
        return cls(
            sessions=Sessions(
                conversations=repos.conversations,
                directory=repos.directory,
                messages=repos.messages,
                search=repos.search,
                lookups=repos.lookups,
                archive=archive,
                planner=planner,
                attachments=repos.attachments,
            ),
            people=People(
                directory=repos.directory,
                search=repos.search,
                identities=repos.identities,
                linking=linking,
                clock=clock,
            ),
            profiles=PersonProfiles(directory=repos.directory, profiles=profiles, clock=clock),
            chunks=Chunks(archive=archive, work=repos.work, enqueue=queue.enqueue, clock=clock),
            pairings=PairingRequests(pairings=repos.pairings, clock=clock),
            retries=Retries(
                work=repos.work,
                messages=repos.messages,
                outbox=outbox,
                enqueue=queue.enqueue,
                clock=clock,
            ),
            messages=OperatorMessages(
                repos.messages,
                outbox,
                hub,
                clock,
                llm,
                settings.llm_max_reply_tokens,
                ledger=repos.usage,
            ),
            erasing=erasing,
            portability=Portability(
                exports=Exports(stores.sessions),
                imports=Imports(stores.sessions, clean=clean, archive_dir=archive_dir(settings)),
                clock=clock,
            ),
            export_links=ExportLinks(rights=repos.rights, clock=clock),
            usage=UsageReports(repos.usage, settings.llm_prices),
            overview=Overview(
                stats=repos.stats,
                leases=repos.leases,
                archive=archive,
                core=core,
                connectors=connectors,
                clock=clock,
                prompt_limit=settings.llm_context_tokens - settings.llm_max_reply_tokens,
            ),
            idempotency=Idempotency(keys=repos.idempotency, clock=clock),
            reminders=PersonReminders(repos.directory, repos.schedules, planner),
            health=Health(
                engine=stores.engine,
                queue=queue,
                metrics=metrics,
                archive=archive,
                deliveries=repos.deliveries,
                profiles=profiles,
                clock=clock,
            ),
        )
