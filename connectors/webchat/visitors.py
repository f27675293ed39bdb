"""Web chat visitors: who holds a token, for how long, under what name, and what they
may send how often."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from connectors.webchat.identity import IdentityTokens
from connectors.webchat.tokens import VisitorTokens
from gateway.sdk import (
    AuthError,
    Clocked,
    History,
    Identities,
    IdentityRef,
    Inbound,
    InputError,
    Limits,
    LiveEvents,
    RateLimit,
    RateLimited,
    Received,
    Receiving,
    Slots,
    Uploading,
    WebchatSettings,
)

CHANNEL = "webchat"
# An anonymous visitor's label; a site's identified user goes by the name the site gives.
VISITOR_NAME = "Web visitor"
# A site's identified user is the web chat identity `site:<sub>` (anonymous visitors'
# ids are hex, so the two never meet).
SITE_PREFIX = "site:"


class WebchatCore(Receiving, Identities, History, LiveEvents, Clocked, Limits, Uploading, Protocol):
    """The roles of the core the web chat uses: it signs its visitors in itself, its
    clients read the stored conversation and its live events (no message is sent to
    them), tokens expire by the core's clock, and how often a visitor may write holds
    across replicas."""


@dataclass(frozen=True, slots=True)
class Visitor:
    id: str
    identity: IdentityRef
    # When the token they came with stops working (Unix time); None: it does not.
    expires_at: int | None = None


class Visitors:
    core: WebchatCore  # given by open()
    new_sessions: RateLimit  # made by open(), from the core's
    messages: RateLimit

    def __init__(self, settings: WebchatSettings) -> None:
        self.settings = settings
        self._tokens: VisitorTokens | None = None
        self._identities: IdentityTokens | None = None
        # A client told to wait for a free socket slot tries again after this long.
        self.sockets = Slots(settings.sockets_per_visitor, "open sockets", retry_after=10)

    def open(
        self, core: WebchatCore, tokens: VisitorTokens, identities: IdentityTokens | None
    ) -> None:
        """`identities`: reads sites' identity tokens (None: none are taken)."""
        self.core = core
        self._tokens = tokens
        self._identities = identities
        self.new_sessions = core.rate_limit(self.settings.sessions_per_minute, "new sessions")
        self.messages = core.rate_limit(self.settings.messages_per_minute, "messages")
        self.uploads = core.rate_limit(self.settings.uploads_per_minute, "uploads")

    @property
    def tokens(self) -> VisitorTokens:
        if self._tokens is None:
            raise RuntimeError("web chat used before start()")
        return self._tokens

    async def new_visitor(self) -> tuple[Visitor, str]:
        visitor_id, token = self.tokens.new_visitor()
        return await self.by_id(visitor_id), token

    async def identify(self, identity_token: str) -> tuple[Visitor, str]:
        """The visitor a site's identity token names (their one conversation, on any
        device) and a token for them that expires with it."""
        if self._identities is None:
            raise AuthError(
                "this gateway takes no identity tokens: PARLEY_WEBCHAT_IDENTITY_SECRET is unset"
            )
        user = self._identities.read(identity_token)
        visitor_id = f"{SITE_PREFIX}{user.sub}"
        identity = await self.core.identity(CHANNEL, visitor_id, user.name or VISITOR_NAME)
        # The site's latest word on its user's name holds (on every device, for what they
        # write from now on); a token without a name leaves it as it is.
        if user.name is not None and user.name != identity.display_name:
            identity = await self.core.relabel(identity, user.name)
        visitor = Visitor(visitor_id, identity, user.expires_at)
        return visitor, self.tokens.issue_identified(visitor_id, user.expires_at)

    async def visitor(self, token: str) -> Visitor:
        grant = self.tokens.verify(token)
        return await self.by_id(grant.visitor, grant.expires_at)

    async def by_id(self, visitor_id: str, expires_at: int | None = None) -> Visitor:
        """The visitor of an id a verified token carried (that expires at `expires_at`)."""
        identity = await self.core.identity(CHANNEL, visitor_id, VISITOR_NAME)
        return Visitor(visitor_id, identity, expires_at)

    def seconds_left(self, visitor: Visitor) -> float | None:
        """How long the visitor's token still works (0 or less: no more); None: for good."""
        if visitor.expires_at is None:
            return None
        return visitor.expires_at - self.core.clock.now().timestamp()

    async def submit(
        self,
        visitor_id: str,
        text: str,
        client_id: str | None,
        attachments: tuple[int, ...] = (),
    ) -> Received:
        """Store what a visitor sent: `text`, and the files they uploaded for it (by
        the ids the uploads gave; text may be empty then)."""
        # Client ids are only unique per visitor; the platform id must be per channel.
        platform_id = None if client_id is None else f"{visitor_id}:{client_id}"
        try:
            await self.messages.take(visitor_id)
        except RateLimited:
            # A message sent again (after a reconnect) that was stored the first time is
            # no new message: refusing it would give it back to be sent, and stored, twice.
            again = (
                None
                if platform_id is None
                else await self.core.already_stored(CHANNEL, platform_id)
            )
            if again is None:
                raise
            return Received(again, (await self.by_id(visitor_id)).identity, created=False)
        if not text.strip() and not attachments:
            raise InputError("text must not be empty")
        limit = self.settings.max_message_chars
        if len(text) > limit:
            raise InputError(f"text is longer than {limit} characters")
        # Read afresh: the site may have renamed its user since this visitor came.
        visitor = await self.by_id(visitor_id)
        inbound = Inbound(
            channel=CHANNEL,
            external_user_id=visitor_id,
            text=text,
            platform_message_id=platform_id,
            display_name=visitor.identity.display_name or VISITOR_NAME,
            attachment_ids=attachments,
        )
        # The POST waits for the reply.
        return await self.core.receive(inbound, awaited=True, sender=visitor.identity)
