"""Identity tokens: a site that knows its logged-in user signs a short-lived HS256 token
(`sub`, optional `name`, `exp` at most 24 h ahead) with PARLEY_WEBCHAT_IDENTITY_SECRET,
and the web chat joins that person's one conversation on any device, under that name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import jwt

from gateway.sdk import NAME_CHARS, AuthError, clean

MAX_LIFETIME_SECONDS = 24 * 3600
# Clocks of the site and the gateway may disagree by this much.
LEEWAY_SECONDS = 30
# A site's user id: what sites use (numbers, uuids, e-mail addresses), nothing that
# could pass for the separators of our own ids.
_SUB = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")
# What would take a name out of its one line (a transcript's header is that line) or
# turn what follows it around on screen: controls, line breaks, bidi controls.
_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\s]+")


@dataclass(frozen=True, slots=True)
class SiteUser:
    sub: str
    name: str | None  # as `display_name` makes it
    expires_at: int  # Unix time


class IdentityTokens:
    def __init__(self, secret: bytes, now: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self._now = now

    def read(self, token: str) -> SiteUser:
        """The site's user a token names; `AuthError` saying why it is refused."""
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=["HS256"],
                options={"require": ["sub", "exp"], "verify_exp": False},
            )
        except jwt.InvalidTokenError:
            raise AuthError("the identity token is not one this site signed") from None
        expires = claims["exp"]
        if not isinstance(expires, int) or isinstance(expires, bool):
            raise AuthError("the identity token's `exp` is not a time")
        now = self._now()
        if expires + LEEWAY_SECONDS <= now:
            raise AuthError("the identity token has expired: ask the site for a new one")
        if expires - now > MAX_LIFETIME_SECONDS + LEEWAY_SECONDS:
            raise AuthError("an identity token may be valid for 24 hours at most")
        sub, name = claims["sub"], claims.get("name")
        if not isinstance(sub, str) or not _SUB.fullmatch(sub):
            raise AuthError("the identity token's `sub` must be 1-128 letters, digits or ._@+-")
        if name is not None and not isinstance(name, str):
            raise AuthError("the identity token's `name` must be text")
        return SiteUser(sub, None if name is None else display_name(name), expires)


def display_name(name: str) -> str | None:
    """A site's name for its user as we label them: storable, on one line, at most
    NAME_CHARS long; None if nothing is left of it."""
    return _BREAKS.sub(" ", clean(name)).strip()[:NAME_CHARS].rstrip() or None
