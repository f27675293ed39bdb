"""Signed, long-lived visitor tokens: each grants exactly one visitor's conversation."""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid

from gateway.errors import AuthError

_PREFIX = "wc1"


class VisitorTokens:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def new_visitor(self) -> tuple[str, str]:
        """A fresh visitor id and its token."""
        visitor = uuid.uuid4().hex
        return visitor, self.issue(visitor)

    def issue(self, visitor: str) -> str:
        return f"{_PREFIX}.{visitor}.{self._sign(visitor)}"

    def verify(self, token: str) -> str:
        """The visitor id a token grants; `AuthError` if it was not signed by us."""
        prefix, _, rest = token.partition(".")
        visitor, _, signature = rest.partition(".")
        # Tokens are ASCII; anything else is no token of ours (and could not be signed).
        if prefix != _PREFIX or not visitor or not signature or not token.isascii():
            raise AuthError("malformed web chat token")
        if not hmac.compare_digest(signature, self._sign(visitor)):
            raise AuthError("invalid web chat token")
        return visitor

    def _sign(self, visitor: str) -> str:
        digest = hmac.new(self._key, b"webchat-visitor:" + visitor.encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
