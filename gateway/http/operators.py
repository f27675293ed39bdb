"""Operators in a browser: the admin token once, then a session cookie.

The cookie holds a random token (the database keeps only its hash), is HttpOnly and
SameSite=Strict, and is Secure: a sign-in over plain HTTP is refused except on the
machine itself (loopback), where browsers keep Secure cookies anyway. Every change also
needs the session's CSRF token in `X-CSRF-Token` — derived from the cookie's token, so
the page that shows it never stores it — and, where the browser says, the same origin.
Changing PARLEY_ADMIN_TOKEN signs every browser out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from fastapi import Request, Response
from starlette.requests import HTTPConnection

from gateway.clock import Clock
from gateway.http.cors import own_origin
from gateway.http.problems import ApiError
from gateway.replicas.rate_limits import RateLimits
from gateway.secrets import signer
from gateway.settings import Settings
from memory.storage.operator_sessions import OperatorSessions

COOKIE = "parley_operator"
CSRF_HEADER = "X-CSRF-Token"
SESSION_TTL = timedelta(hours=12)
LINK_TTL = timedelta(minutes=15)
# In the fragment, which a browser never sends: a link previewer cannot spend it.
LINK_PATH = "/admin/signin#link="
SIGN_INS_PER_MINUTE = 10
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Operator:
    """A signed-in browser: its CSRF token is what its changes must carry."""

    token: str
    csrf: str


class OperatorAuth:
    def __init__(
        self,
        sessions: OperatorSessions,
        keys: Sequence[bytes],
        admin_token: str | None,
        clock: Clock,
        limits: RateLimits,
    ) -> None:
        self._sessions = sessions
        # Which admin token a session (or a link) was made under, and its CSRF token:
        # each signed under a purpose of its own, so none passes for another.
        self._sessions_of = signer(keys, "parley operator session")
        self._links_of = signer(keys, "parley sign-in link")
        self._csrf_of = signer(keys, "parley operator csrf")
        self._admin_token = admin_token
        self._clock = clock
        self.sign_ins = limits.per_minute(SIGN_INS_PER_MINUTE, "sign-ins")

    async def link(self) -> str:
        """A fresh one-time sign-in secret, good for `LINK_TTL` (never the admin token)."""
        secret = secrets.token_urlsafe(32)
        await self._sessions.open(
            _hash(secret),
            self._link_key(self._expected()),
            now=self._clock.now(),
            ttl=LINK_TTL,
        )
        return secret

    async def sign_in(
        self, request: Request, response: Response, *, token: str | None, link: str | None
    ) -> Operator:
        """Check the admin token, or spend a one-time link, and set the session cookie
        on `response`."""
        await self.sign_ins.take(request.client.host if request.client else "")
        if request.url.scheme != "https" and request.url.hostname not in LOOPBACK:
            raise ApiError(
                400, "sign in over HTTPS: the session cookie is never sent in clear text"
            )
        expected = self._expected()
        if link is not None:
            spent = await self._sessions.redeem(
                _hash(link), self._link_key(expected), now=self._clock.now()
            )
            if not spent:
                raise ApiError(
                    401,
                    "this sign-in link has been used or has expired: run `parley admin-link` "
                    "for a fresh one",
                )
        elif token is None or not hmac.compare_digest(token.encode(), expected.encode()):
            raise ApiError(401, "that is not the admin token")
        token = secrets.token_urlsafe(32)
        await self._sessions.open(
            _hash(token), self._admin_key(expected), now=self._clock.now(), ttl=SESSION_TTL
        )
        response.set_cookie(
            COOKIE,
            token,
            max_age=int(SESSION_TTL.total_seconds()),
            path="/",
            secure=True,
            httponly=True,
            samesite="strict",
        )
        return Operator(token, self._csrf(token))

    async def operator(self, connection: HTTPConnection) -> Operator | None:
        """The browser's session (a request's or a socket's), if its cookie holds a
        live one."""
        token = connection.cookies.get(COOKIE)
        if not token or self._admin_token is None:
            return None
        found = await self._sessions.find(_hash(token), now=self._clock.now())
        if found is None or not self._sessions_of.verify_signature(
            self._admin_token.encode(), found.admin_key.encode()
        ):
            return None
        return Operator(token, self._csrf(token))

    def check_change(self, request: Request, operator: Operator) -> None:
        """A change (any unsafe method) must come from the dashboard's own page."""
        if request.method in SAFE_METHODS:
            return
        given = request.headers.get(CSRF_HEADER, "")
        if not given.isascii() or not self._csrf_of.verify_signature(
            operator.token.encode(), given.encode()
        ):
            raise ApiError(403, f"a change needs the session's CSRF token in {CSRF_HEADER}")
        origin = request.headers.get("origin")
        if origin is not None and origin != own_origin(request):
            raise ApiError(403, "a change must come from the dashboard's own origin")

    async def sign_out(self, operator: Operator, response: Response) -> None:
        await self._sessions.close(_hash(operator.token))
        response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")

    def _expected(self) -> str:
        if self._admin_token is None:
            raise ApiError(
                503, "the dashboard is off: set PARLEY_ADMIN_TOKEN (16+ characters) to enable it"
            )
        return self._admin_token

    def _admin_key(self, admin_token: str) -> str:
        return self._sessions_of.get_signature(admin_token.encode()).decode()

    def _link_key(self, admin_token: str) -> str:
        return self._links_of.get_signature(admin_token.encode()).decode()

    def _csrf(self, token: str) -> str:
        return self._csrf_of.get_signature(token.encode()).decode()


def sign_in_url(settings: Settings, secret: str) -> str:
    """Where a one-time sign-in link points: the public address, else this machine's."""
    if settings.public_url:
        base = settings.public_url.rstrip("/")
    else:
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
        base = f"http://{host}:{settings.port}"
    return f"{base}{LINK_PATH}{secret}"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
