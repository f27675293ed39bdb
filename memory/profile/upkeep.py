"""Profile upkeep, the jobs the queue runs: take new facts from each archived chunk, and
tidy the profile by edits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import structlog

from memory.archive.archive import Archive
from memory.archive.summarize import TextModel
from memory.archive.upkeep import EXTRACT, Enqueue
from memory.profile.extraction import (
    EXTRACT_SYSTEM,
    extraction_request,
    is_typed_by_user,
    parse_facts,
    with_evidence,
)
from memory.profile.facts import EditError, Fact, ProfileView, StaleRevision
from memory.profile.profiles import BY_TIDY, Profiles
from memory.profile.tidy import TIDY_SYSTEM, parse_edits
from memory.provenance import dialogue
from memory.storage.conversations import Conversations
from memory.storage.messages import Messages
from memory.storage.models import ChunkStatus

log = structlog.get_logger(__name__)

TIDY = "tidy"


@dataclass(frozen=True, slots=True)
class ProfileLimits:
    tidy_at_chars: int = 40_000
    tidy_target_chars: int = 30_000
    regrow_chars: int = 4_000
    max_passes: int = 2
    backoff_seconds: tuple[float, ...] = (3_600.0, 21_600.0, 86_400.0)


class ProfileJobs:
    def __init__(
        self,
        *,
        profiles: Profiles,
        archive: Archive,
        messages: Messages,
        conversations: Conversations,
        model: TextModel | None,
        enqueue: Enqueue,
        now: Callable[[], datetime],
        limits: ProfileLimits,
    ) -> None:
        self._profiles = profiles
        self._archive = archive
        self._messages = messages
        self._conversations = conversations
        self._model = model  # None: no model configured, so nothing is extracted
        self._enqueue = enqueue
        self._now = now
        self._limits = limits

    async def extract(self, chunk_id: int) -> None:
        chunk = await self._archive.chunk(chunk_id)
        if chunk is None or chunk.level != 0 or chunk.status is not ChunkStatus.READY:
            return
        owner = await self._conversations.personal_owner(chunk.conversation_id)
        if owner is None:  # a group: its talk is nobody's personal fact
            await self._archive.mark_extracted(chunk_id)
            return
        profile = await self._profiles.get(owner)
        facts: list[Fact] = []
        refused = 0
        if self._model is not None:
            messages = await self._messages.messages_between(
                chunk.conversation_id, chunk.seq_start, chunk.seq_end
            )
            request = extraction_request(profile, chunk.summary or "", messages)
            if any(is_typed_by_user(m) for m in dialogue(messages)):
                answer = await self._model.complete(EXTRACT_SYSTEM, request, 1_000)
                try:
                    facts, refused = with_evidence(parse_facts(answer), chunk_id, messages)
                except ValueError as exc:
                    # Asking again would likely get the same; the chunk stays archived.
                    log.warning("unusable fact extraction", chunk_id=chunk_id, error=str(exc))
            if refused:
                log.warning("facts refused for want of evidence", chunk_id=chunk_id, count=refused)
        profile = await self._profiles.append(
            owner, facts, self._now(), chunk_id=chunk_id, refused=refused
        )
        if profile.chars > self._limits.tidy_at_chars:
            await self._enqueue(TIDY, str(owner), key=f"{TIDY}:{owner}")

    async def tidy(self, user_id: uuid.UUID) -> None:
        limits = self._limits
        if self._model is None or not await self._profiles.tidy_due(
            user_id, self._now(), limits.tidy_at_chars
        ):
            return
        profile = await self._profiles.get(user_id)
        for _ in range(limits.max_passes):
            if profile.chars <= limits.tidy_target_chars:
                break
            try:
                profile = await self._tidy_pass(profile)
            except (EditError, StaleRevision) as exc:
                await self._failed(user_id, exc)
                return
            except Exception as exc:  # the model or the network failed
                await self._failed(user_id, exc)
                return
        # Still over the trigger: wait for more growth instead of retrying on every fact.
        shrunk_enough = profile.chars <= limits.tidy_at_chars
        await self._profiles.tidy_finished(
            user_id, wait_until_chars=0 if shrunk_enough else profile.chars + limits.regrow_chars
        )

    async def _tidy_pass(self, profile: ProfileView) -> ProfileView:
        assert self._model is not None
        summaries = await self._archive.recent_summaries_of(profile.user_id, 5)
        prompt = json.dumps(
            {
                "today": self._now().date().isoformat(),
                "target_chars": self._limits.tidy_target_chars,
                "profile_chars": profile.chars,
                "recent_summaries": summaries,
                "profile": profile.numbered(),
            },
            ensure_ascii=False,
            indent=1,
        )
        system = TIDY_SYSTEM.replace("{target}", f"{self._limits.tidy_target_chars:,}")
        edits = parse_edits(await self._model.complete(system, prompt, 4_000))
        return await self._profiles.edit(
            profile.user_id, profile.revision, edits, self._now(), by=BY_TIDY, shrink=True
        )

    async def _failed(self, user_id: uuid.UUID, exc: Exception) -> None:
        wait = await self._profiles.tidy_failed(user_id, self._now(), self._limits.backoff_seconds)
        log.warning("profile tidy failed", user_id=str(user_id), error=str(exc), retry_in=str(wait))

    async def sweep(self) -> int:
        """Queue extraction for summarised chunks that have not given their facts yet."""
        due = await self._archive.chunks_to_extract()
        for chunk_id in due:
            await self._enqueue(EXTRACT, str(chunk_id), key=f"{EXTRACT}:{chunk_id}")
        tidy = await self._profiles.due_for_tidy(self._now(), self._limits.tidy_at_chars)
        for user_id in tidy:
            await self._enqueue(TIDY, str(user_id), key=f"{TIDY}:{user_id}")
        return len(due) + len(tidy)
