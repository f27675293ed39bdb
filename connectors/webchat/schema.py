"""Wire shapes of the web chat API."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from memory.store import StoredMessage

ClientId = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[\w.:-]+$")]


class MessageOut(BaseModel):
    seq: int
    role: Literal["user", "assistant", "event"]
    text: str
    channel: str
    created_at: str

    @classmethod
    def of(cls, message: StoredMessage) -> MessageOut:
        return cls(
            seq=message.seq,
            role=message.role.value,
            text=message.text,
            channel=message.channel,
            created_at=message.created_at.isoformat(),
        )


class SessionOut(BaseModel):
    token: str
    conversation_id: uuid.UUID


class SendIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1)
    client_id: ClientId | None = None


class ExchangeOut(BaseModel):
    message: MessageOut
    reply: MessageOut | None


class HistoryOut(BaseModel):
    messages: list[MessageOut]


class SendFrame(BaseModel):
    type: Literal["message"]
    text: str
    client_id: ClientId | None = None


class ResumeFrame(BaseModel):
    type: Literal["resume"]
    after_seq: int = Field(ge=0)


ClientFrame: TypeAdapter[SendFrame | ResumeFrame] = TypeAdapter(
    Annotated[SendFrame | ResumeFrame, Field(discriminator="type")]
)
