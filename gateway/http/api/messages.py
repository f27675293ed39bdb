"""A conversation's messages: read them both ways, search them, send one in."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.http.api.inputs import Input
from gateway.http.api.once import OnceDep
from gateway.http.deps import CursorsDep, OperatorMessagesDep, SessionsDep
from gateway.http.paging import CursorQuery, LimitQuery, Page, scope
from gateway.http.problems import ApiError, responses
from gateway.http.wire import AttachmentOut, MessageOut, file_response
from gateway.text import MAX_INT64, StorableText
from memory.storage.attachments import AttachmentView
from memory.storage.messages import StoredMessage
from memory.storage.search import MARK_END, MARK_START, SearchHit, SearchPosition

router = APIRouter(tags=["messages"])

SeqQuery = Annotated[int | None, Query(ge=0, le=MAX_INT64)]
TEXT_CHARS = 20_000


class UsageOut(BaseModel):
    prompt_tokens: int  # the cached ones included
    cached_tokens: int
    completion_tokens: int

    @classmethod
    def of(cls, message: StoredMessage) -> UsageOut | None:
        if message.usage_prompt is None:
            return None
        return cls(
            prompt_tokens=message.usage_prompt,
            cached_tokens=message.usage_cached or 0,
            completion_tokens=message.usage_completion or 0,
        )


class OperatorMessage(MessageOut):
    """A message as operators see it: who and what produced it, and its delivery."""

    id: int
    conversation_id: uuid.UUID
    source: str | None
    author_name: str
    platform_message_id: str | None
    delivery: str | None
    # The platform's reason when delivery failed (or is being retried).
    delivery_error: str | None = None
    # A model's reply: the model that wrote it (a fallback's, when the main one failed),
    # and the tokens its calls took as the model's server counted them.
    model: str | None = None
    usage: UsageOut | None = None

    @classmethod
    def of(
        cls, message: StoredMessage, attachments: Sequence[AttachmentView] = ()
    ) -> OperatorMessage:
        return cls(
            **cls._fields(message),
            id=message.id,
            conversation_id=message.conversation_id,
            source=message.source,
            author_name=message.author_name,
            platform_message_id=message.platform_message_id,
            delivery=None if message.delivery is None else message.delivery.value,
            delivery_error=message.delivery_error,
            model=message.model,
            usage=UsageOut.of(message),
            attachments=[AttachmentOut.of(a) for a in attachments],
        )


class OperatorMessageIn(Input):
    """Either `text` (sent as written) or `instruction` (the assistant writes it)."""

    text: Annotated[StorableText, Field(min_length=1, max_length=TEXT_CHARS)] | None = None
    instruction: Annotated[StorableText, Field(min_length=1, max_length=TEXT_CHARS)] | None = None
    channel: Annotated[str, Field(max_length=32, examples=["telegram"])] | None = None

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "Your order has shipped.", "channel": "telegram"},
                {"instruction": "Tell them the service will be down on Sunday night."},
            ]
        }
    )

    @model_validator(mode="after")
    def _one(self) -> OperatorMessageIn:
        if (self.text is None) == (self.instruction is None):
            raise ValueError("give exactly one of `text` and `instruction`")
        return self


class SearchHitOut(BaseModel):
    kind: Literal["message", "chunk"]
    seq: int | None = Field(description="the message's, for a message hit")
    chunk_id: int | None = Field(description="the chunk's, for a hit in a transcript")
    seq_start: int | None
    seq_end: int | None
    time: datetime
    snippet: str = Field(description=f"the match marked {MARK_START}like this{MARK_END}")

    @classmethod
    def of(cls, hit: SearchHit) -> SearchHitOut:
        return cls(
            kind=hit.kind.value,
            seq=hit.seq,
            chunk_id=hit.chunk_id,
            seq_start=hit.seq_start,
            seq_end=hit.seq_end,
            time=hit.time,
            snippet=hit.snippet,
        )


MessagePage = Page[OperatorMessage]
SearchPage = Page[SearchHitOut]


@router.get("/sessions/{session_id}/messages", responses=responses(404, 422))
async def session_messages(
    sessions: SessionsDep,
    cursors: CursorsDep,
    session_id: uuid.UUID,
    after_seq: SeqQuery = None,
    before_seq: SeqQuery = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: CursorQuery = None,
) -> MessagePage:
    """Oldest first after `after_seq` (default: from the start), or the page just
    before `before_seq`; `next_cursor` goes on in the same direction."""
    if after_seq is not None and before_seq is not None:
        raise ApiError(422, "give `after_seq` or `before_seq`, not both")
    key = scope("messages", session=str(session_id))
    position = cursors.read(key, cursor)
    if position is not None:
        direction, seq = position
        after_seq, before_seq = (seq, None) if direction == "after" else (None, seq)
    if before_seq is not None:
        page = await sessions.messages_before(session_id, before_seq, limit + 1)
        more = len(page) > limit
        shown = page[-limit:]
        next_cursor = cursors.make(key, ["before", shown[0].seq]) if more else None
    else:
        page = await sessions.messages_after(session_id, after_seq or 0, limit + 1)
        shown, next_cursor = cursors.cut(key, page, limit, lambda m: ["after", m.seq])
    files = await sessions.attachments_of(shown)
    items = [OperatorMessage.of(m, files.get(m.id, ())) for m in shown]
    return MessagePage(items=items, next_cursor=next_cursor)


@router.get(
    "/attachments/{attachment_id}",
    responses={200: {"content": {"application/octet-stream": {}}}, **responses(404)},
    response_class=Response,
)
async def attachment(
    sessions: SessionsDep, attachment_id: Annotated[int, Path(ge=1, le=MAX_INT64)]
) -> Response:
    """The file as kept, always as a download: a browser never renders it in place."""
    return file_response(*await sessions.attachment(attachment_id))


@router.get("/sessions/{session_id}/search", responses=responses(404))
async def search_session(
    sessions: SessionsDep,
    cursors: CursorsDep,
    session_id: uuid.UUID,
    q: Annotated[StorableText, Query(min_length=1, max_length=500)],
    since: Annotated[datetime | None, Query(alias="from")] = None,
    until: Annotated[datetime | None, Query(alias="to")] = None,
    limit: LimitQuery = 20,
    cursor: CursorQuery = None,
) -> SearchPage:
    """Every word of `q` in a message or in an archived transcript, newest first."""
    for bound in (since, until):
        if bound is not None and bound.tzinfo is None:
            raise ApiError(422, "give `from` and `to` with a UTC offset")
    key = scope("search", session=str(session_id), q=q, since=since, until=until)
    position = cursors.read(key, cursor)
    hits = await sessions.search(
        session_id,
        q,
        limit=limit + 1,
        start=since,
        end=until,
        after=None if position is None else SearchPosition.from_token(position[0]),
    )
    shown, next_cursor = cursors.cut(key, hits, limit, lambda hit: [hit.position.token()])
    return SearchPage(items=[SearchHitOut.of(hit) for hit in shown], next_cursor=next_cursor)


@router.post(
    "/sessions/{session_id}/messages",
    status_code=201,
    response_model=OperatorMessage,
    responses=responses(404, 409, 422, 503),
)
async def send_message(
    sessions: SessionsDep,
    operator: OperatorMessagesDep,
    once: OnceDep,
    session_id: uuid.UUID,
    body: OperatorMessageIn,
) -> Response:
    """Send a message into the conversation, labelled as an operator's, on `channel`
    or the one last written from; or have the assistant write it from `instruction`."""

    async def send() -> OperatorMessage:
        await sessions.require(session_id)
        target = await operator.recipient(session_id, body.channel)
        text = body.text
        if text is None:
            assert body.instruction is not None
            text = await operator.compose(session_id, body.instruction)
        return OperatorMessage.of(await operator.send(target, text))

    return await once.run(send, 201, about=lambda message: message.conversation_id)
