"""Signed visitor tokens: each grants exactly one visitor's conversation.

An anonymous visitor's token (`wc1`) lasts; one issued for a site's identified user
(`wc2`) expires with the identity token it was exchanged for, so a session (an open
socket too) ends when the site stops vouching for its user.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from gateway.sdk import AuthError, SignInExpired

_PREFIX = "wc1"
_IDENTIFIED = "wc2"
EXPIRED = "the web chat sign-in has expired: identify again"


@dataclass(frozen=True, slots=True)
class Grant:
    """What a verified token grants: one visitor, until `expires_at` (Unix time; None:
    for good)."""

    visitor: str
    expires_at: int | None = None


class VisitorTokens:
    def __init__(self, key: bytes, now: Callable[[], float] = time.time) -> None:
        self._key = key
        self._now = now

    def new_visitor(self) -> tuple[str, str]:
        """A fresh visitor id and its token."""
        visitor = uuid.uuid4().hex
        return visitor, self.issue(visitor)

    def issue(self, visitor: str) -> str:
        return f"{_PREFIX}.{visitor}.{self._sign(visitor)}"

    def issue_identified(self, visitor: str, expires_at: int) -> str:
        """A token for `visitor` (any text) that stops working at `expires_at`."""
        payload = f"{_b64(visitor.encode())}.{expires_at}"
        return f"{_IDENTIFIED}.{payload}.{self._sign(payload, purpose=b'webchat-identified:')}"

    def verify(self, token: str) -> Grant:
        """What a token grants; `AuthError` if it was not signed by us, `SignInExpired`
        if it has run out."""
        if token.startswith(_IDENTIFIED + "."):
            return self._verify_identified(token)
        prefix, _, rest = token.partition(".")
        visitor, _, signature = rest.partition(".")
        # Tokens are ASCII; anything else is no token of ours (and could not be signed).
        if prefix != _PREFIX or not visitor or not signature or not token.isascii():
            raise AuthError("malformed web chat token")
        if not hmac.compare_digest(signature, self._sign(visitor)):
            raise AuthError("invalid web chat token")
        return Grant(visitor)

    def _verify_identified(self, token: str) -> Grant:
        parts = token.split(".")
        if len(parts) != 4 or not token.isascii() or not parts[2].isdigit():
            raise AuthError("malformed web chat token")
        payload = f"{parts[1]}.{parts[2]}"
        if not hmac.compare_digest(parts[3], self._sign(payload, b"webchat-identified:")):
            raise AuthError("invalid web chat token")
        try:
            visitor = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise AuthError("malformed web chat token") from None
        expires_at = int(parts[2])
        if expires_at <= self._now():
            raise SignInExpired(EXPIRED)
        return Grant(visitor, expires_at)

    def _sign(self, payload: str, purpose: bytes = b"webchat-visitor:") -> str:
        digest = hmac.new(self._key, purpose + payload.encode(), hashlib.sha256)
        return _b64(digest.digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
