"""Signed visitor tokens: each grants exactly one visitor's conversation.

An anonymous visitor's token (`wc1`) lasts; one issued for a site's identified user
(`wc2`) expires with the identity token it was exchanged for, so a session (an open
socket too) ends when the site stops vouching for its user.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from itsdangerous import Signer

from gateway.sdk import AuthError, SignInExpired

_PREFIX = "wc1"
_IDENTIFIED = "wc2"
EXPIRED = "the web chat sign-in has expired: identify again"
_VISITOR_PURPOSE = b"webchat-visitor:"
_IDENTIFIED_PURPOSE = b"webchat-identified:"


@dataclass(frozen=True, slots=True)
class Grant:
    """What a verified token grants: one visitor, until `expires_at` (Unix time; None:
    for good)."""

    visitor: str
    expires_at: int | None = None


class VisitorTokens:
    def __init__(self, keys: Sequence[bytes], now: Callable[[], float] = time.time) -> None:
        """`keys`: the first signs, each one verifies (a rotation keeps every visitor)."""
        # The key as it is, the purpose in the signed text: the signatures tokens have
        # always carried (itsdangerous signs with the last key it is given).
        self._signer = Signer(
            list(reversed(keys)), key_derivation="none", digest_method=hashlib.sha256
        )
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
        return f"{_IDENTIFIED}.{payload}.{self._sign(payload, _IDENTIFIED_PURPOSE)}"

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
        if not self._signed(visitor, signature):
            raise AuthError("invalid web chat token")
        return Grant(visitor)

    def _verify_identified(self, token: str) -> Grant:
        parts = token.split(".")
        if len(parts) != 4 or not token.isascii() or not parts[2].isdigit():
            raise AuthError("malformed web chat token")
        payload = f"{parts[1]}.{parts[2]}"
        if not self._signed(payload, parts[3], _IDENTIFIED_PURPOSE):
            raise AuthError("invalid web chat token")
        try:
            visitor = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise AuthError("malformed web chat token") from None
        expires_at = int(parts[2])
        if expires_at <= self._now():
            raise SignInExpired(EXPIRED)
        return Grant(visitor, expires_at)

    def _sign(self, payload: str, purpose: bytes = _VISITOR_PURPOSE) -> str:
        return self._signer.get_signature(purpose + payload.encode()).decode()

    def _signed(self, payload: str, signature: str, purpose: bytes = _VISITOR_PURPOSE) -> bool:
        return self._signer.verify_signature(purpose + payload.encode(), signature.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
