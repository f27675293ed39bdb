"""The two apps the turn-overhead benchmark compares, and the fake model it uses.

(a) `baseline_app`: a bare FastAPI endpoint that stores one message-shaped row with
    one INSERT (through the same engine factory and table as the gateway) and commits.
(b) `gateway_app`: the real gateway from `create_app`, its model replaced by
    `ZeroLatencyLLM`, so a web chat turn costs only what the gateway itself does.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.app import create_app
from gateway.llm import Prompt
from gateway.settings import Settings
from memory.storage.engine import create_engine, session_factory
from memory.storage.models import Conversation, ConversationKind, Message, Role, utcnow

BASELINE_PATH = "/bench/messages"
GATEWAY_PATH = "/webchat/messages"
REPLY = "ok, noted."
SECRET_KEY = "bench-secret-key-0123456789abcdef"


class ZeroLatencyLLM:
    """A model that answers at once with a short fixed reply, without any network."""

    name = "zero-latency"
    model = "zero-latency"
    offers_tools = True  # as the real model it stands in for; it never calls one
    sees_images = False

    def image_tokens(self, width: int, height: int) -> int:
        return 0

    async def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        yield REPLY

    async def aclose(self) -> None:
        """Nothing to release."""


def gateway_settings(database_url: str, data_dir: Path) -> Settings:
    return Settings(
        _env_file=None,
        database_url=database_url,
        data_dir=data_dir,
        secret_key=SECRET_KEY,
        # The load is one client at full speed: the limits still run, never refuse.
        webchat_sessions_per_minute=10**9,
        webchat_messages_per_minute=10**9,
    )


def gateway_app(database_url: str, data_dir: Path) -> FastAPI:
    return create_app(gateway_settings(database_url, data_dir), llm=ZeroLatencyLLM())


class BaselineIn(BaseModel):
    """The same body the web chat endpoint takes."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1)
    client_id: str | None = None


class BaselineOut(BaseModel):
    id: int
    seq: int


@dataclass
class BaselineStore:
    """What a baseline app writes: message rows into one conversation of its own, each
    one INSERT and one COMMIT through the gateway's engine factory. The schema is
    migrated by the benchmark before any server starts."""

    database_url: str
    title: str

    def __post_init__(self) -> None:
        self._engine: AsyncEngine = create_engine(self.database_url)
        self._sessions = session_factory(self._engine)
        self._conversation_id = uuid.uuid4()
        # One server process, one event loop: a plain counter gives unique seqs.
        self._seqs = itertools.count(1)

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        async with self._sessions() as session:
            session.add(
                Conversation(
                    id=self._conversation_id,
                    kind=ConversationKind.GROUP,
                    channel="bench",
                    group_id=self._conversation_id.hex,
                    title=self.title,
                )
            )
            await session.commit()
        try:
            yield
        finally:
            await self._engine.dispose()

    async def store(self, channel: str, text: str, platform_id: str | None = None) -> Message:
        message = Message(
            conversation_id=self._conversation_id,
            seq=next(self._seqs),
            role=Role.USER,
            channel=channel,
            author_name="Bench",
            text=text,
            platform_message_id=platform_id,
            created_at=utcnow(),
            token_count=0,
            delivery_attempts=0,
        )
        async with self._sessions() as session:
            session.add(message)
            await session.commit()
        return message


def baseline_app(database_url: str) -> FastAPI:
    """One POST endpoint: one INSERT into `messages`, one commit, a small JSON answer."""
    rows = BaselineStore(database_url, "baseline")
    app = FastAPI(title="Parley bench baseline", lifespan=rows.lifespan)

    @app.post(BASELINE_PATH)
    async def store(body: BaselineIn) -> BaselineOut:
        message = await rows.store("bench", body.text, body.client_id)
        return BaselineOut(id=message.id, seq=message.seq)

    return app
