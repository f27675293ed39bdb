"""Operator REST API (`/api/v1`), behind the admin bearer token."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel

from gateway.http.deps import AdminDep, ServicesDep
from gateway.http.wire import MessageOut
from gateway.text import MAX_INT64
from memory.storage.conversations import ConversationView
from memory.storage.messages import StoredMessage

router = APIRouter(prefix="/api/v1", tags=["operators"], dependencies=[AdminDep])


class SessionOut(BaseModel):
    id: uuid.UUID
    kind: str
    user_id: uuid.UUID | None
    title: str
    created_at: datetime
    last_message_at: datetime | None
    message_count: int
    owes_reply: bool

    @classmethod
    def of(cls, view: ConversationView) -> SessionOut:
        return cls(
            id=view.id,
            kind=view.kind.value,
            user_id=view.user_id,
            title=view.title,
            created_at=view.created_at,
            last_message_at=view.last_message_at,
            message_count=view.message_count,
            owes_reply=view.owes_reply,
        )


class SessionList(BaseModel):
    sessions: list[SessionOut]
    limit: int
    offset: int


class OperatorMessage(MessageOut):
    """A message as operators see it: who and what produced it, and its delivery."""

    source: str | None
    author_name: str
    platform_message_id: str | None
    delivery: str | None
    # The platform's reason when delivery failed (or is being retried).
    delivery_error: str | None = None

    @classmethod
    def of(cls, message: StoredMessage) -> OperatorMessage:
        return cls(
            **cls._fields(message),
            source=message.source,
            author_name=message.author_name,
            platform_message_id=message.platform_message_id,
            delivery=None if message.delivery is None else message.delivery.value,
            delivery_error=message.delivery_error,
        )


class MessagePage(BaseModel):
    messages: list[OperatorMessage]
    next_after_seq: int | None


@router.get("/sessions")
async def list_sessions(
    services: ServicesDep,
    user_id: uuid.UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
) -> SessionList:
    views = await services.repos.conversations.list_conversations(
        limit=limit, offset=offset, user_id=user_id
    )
    return SessionList(sessions=[SessionOut.of(v) for v in views], limit=limit, offset=offset)


@router.get("/sessions/{session_id}/messages")
async def session_messages(
    services: ServicesDep,
    session_id: uuid.UUID,
    after_seq: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MessagePage:
    if await services.repos.conversations.get_conversation(session_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such session")
    messages = await services.repos.messages.messages_after(session_id, after_seq, limit)
    next_after = messages[-1].seq if len(messages) == limit else None
    return MessagePage(
        messages=[OperatorMessage.of(m) for m in messages], next_after_seq=next_after
    )
