"""`X-Hub-Signature-256`: HMAC-SHA256 of the raw request body with the app secret."""

from __future__ import annotations

import hashlib
import hmac

from gateway.sdk import AuthError

HEADER = "X-Hub-Signature-256"
_PREFIX = "sha256="


class MissingSignature(AuthError):
    """No signature header at all."""


class BadSignature(AuthError):
    """A signature that does not match the body."""


def sign(app_secret: bytes, body: bytes) -> str:
    return _PREFIX + hmac.new(app_secret, body, hashlib.sha256).hexdigest()


def verify(app_secret: bytes, body: bytes, header: str | None) -> None:
    """Check the header against the raw bytes as received, never re-serialised JSON."""
    if not header:
        raise MissingSignature(f"missing {HEADER}")
    given = header.strip().encode()
    if not hmac.compare_digest(given, sign(app_secret, body).encode()):
        raise BadSignature(f"{HEADER} does not match the body")
