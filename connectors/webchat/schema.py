"""Wire shapes of the web chat API."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from gateway.sdk import MAX_INT64, MessageOut, StorableText

ClientId = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[\w.:-]+$")]


class NewVisitorOut(BaseModel):
    token: str
    conversation_id: uuid.UUID


# One rule for HTTP bodies and socket frames: no unknown fields, no coercion.
_STRICT = ConfigDict(extra="forbid", strict=True)


class IdentifyIn(BaseModel):
    model_config = _STRICT

    identity_token: str = Field(min_length=1, max_length=4096)


# Files one message may carry.
MAX_ATTACHMENTS = 10


class SendIn(BaseModel):
    model_config = _STRICT

    # May be empty when the message carries files.
    text: StorableText = ""
    client_id: ClientId | None = None
    # Files uploaded for this message (`POST /webchat/uploads`), by their ids.
    attachments: list[Annotated[int, Field(ge=1, le=MAX_INT64)]] = Field(
        default_factory=list, max_length=MAX_ATTACHMENTS
    )


class UploadOut(BaseModel):
    """A file kept for the visitor's next message: send its id in `attachments`."""

    attachment_id: int
    kind: str
    mime: str  # as sniffed from its bytes (and, for an image, as re-encoded)
    bytes: int
    width: int | None
    height: int | None


class ExchangeOut(BaseModel):
    message: MessageOut
    reply: MessageOut | None
    # An answer that is not stored: the conversation ended (erased) meanwhile.
    notice: str | None = None


class HistoryOut(BaseModel):
    messages: list[MessageOut]


class SendFrame(SendIn):
    type: Literal["message"]


MAX_RECENT = 200


class ResumeFrame(BaseModel):
    model_config = _STRICT

    type: Literal["resume"]
    after_seq: int = Field(ge=0, le=MAX_INT64)
    # Of what follows `after_seq`, send only the newest `recent` messages (and any the
    # person has not read); older ones are read on demand, `GET /webchat/messages?before_seq=`.
    recent: int | None = Field(default=None, ge=1, le=MAX_RECENT)


class SeenFrame(BaseModel):
    model_config = _STRICT

    type: Literal["seen"]
    seq: int = Field(ge=0, le=MAX_INT64)


class AuthFrame(BaseModel):
    """The first frame of a socket opened without `?token=` (which keeps the token out of
    URLs, and so out of proxies' and servers' logs)."""

    model_config = _STRICT

    type: Literal["auth"]
    token: str = Field(min_length=1, max_length=4096)


ClientFrame: TypeAdapter[SendFrame | ResumeFrame | SeenFrame] = TypeAdapter(
    Annotated[SendFrame | ResumeFrame | SeenFrame, Field(discriminator="type")]
)
