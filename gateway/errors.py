"""Exceptions raised by the gateway core, handled at the edge (HTTP handlers, CLI).

ParleyError
├── ConfigError            a setting is invalid; start-up refuses
├── AuthError              a token or signature did not verify
│   ├── SignInExpired      a token that was good has run out; its issuer gives a new one
│   └── AccessRefused      the channel's access policy does not let this person in
├── InputError             a client sent something we will not store
├── NotFound               what a request names is not there; `what` says what it is
│   ├── ConversationNotFound
│   └── PersonNotFound
├── Conflict               it cannot be done as things stand
│   └── Busy               someone else holds it now; trying again shortly may work
├── Gone                   it was there, and has run out (an expired pairing code)
├── RateLimited            a client asked too often; it may try again after a while
├── LLMError               the model could not produce a reply
│   └── LLMUnavailable     after retries: unreachable, timing out or failing
└── DeliveryError          a platform refused or failed to take a reply
    └── Undeliverable      retrying cannot help (blocked, window closed, bad request)
"""

from __future__ import annotations


class ParleyError(Exception):
    """Base of every error Parley raises on purpose."""


class ConfigError(ParleyError):
    """A setting is invalid. The message names it."""


class AuthError(ParleyError):
    """Credentials were missing or wrong."""


class SignInExpired(AuthError):
    """A token that was good has run out: the client asks where it got it for a new one
    (a site's identified web chat visitor, the site)."""


class AccessRefused(AuthError):
    """Nothing is stored; `answer` (a refusal or a pairing code) goes back to the person."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        super().__init__(answer)


class LeftUnanswered(ParleyError):
    """The message waited on was stored and will get no reply: the day's tokens are
    spent and the person was told so already."""


class ConversationEnded(ParleyError):
    """The conversation waited on is gone (erased, or deleted by an operator); `notice`
    says so to the person."""

    def __init__(self, notice: str) -> None:
        self.notice = notice
        super().__init__(notice)


class InputError(ParleyError):
    """Client input that is refused with a clear reason."""


class MediaRefused(InputError):
    """A file that is not kept: `reason` is `too_large`, `unsupported`, `corrupt` or
    `empty`, and the message says why in words a person understands."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class FileUnavailable(ParleyError):
    """A platform did not give a file's bytes: `transient` if asking again later may
    (a time-out, a 5xx, a 429), not if it never will (gone, refused). Its message never
    carries a URL or a token."""

    def __init__(self, message: str, *, transient: bool) -> None:
        self.transient = transient
        super().__init__(message)


class NotFound(ParleyError):
    """There is no such thing as the request names: `f"no such {what}"`."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"no such {what}")


class ConversationNotFound(NotFound):
    # Operators know a conversation as a session (`/api/v1/sessions`).
    def __init__(self) -> None:
        super().__init__("session")


class PersonNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("user")


class Conflict(ParleyError):
    """Refused because of how things stand; the message says what stands in the way."""


class Busy(Conflict):
    """Someone else holds it (a running turn, a worker): the same request may work
    shortly."""


class Gone(ParleyError):
    """It existed, and has run out for good; asking again will not bring it back."""


class RateLimited(ParleyError):
    def __init__(self, detail: str, *, retry_after: float) -> None:
        self.detail = detail
        self.retry_after = retry_after
        super().__init__(detail)


class LLMError(ParleyError):
    """The language model did not give a usable answer."""


class LLMUnavailable(LLMError):
    def __init__(self, reason: str, *, attempts: int) -> None:
        self.reason = reason
        self.attempts = attempts
        super().__init__(f"model unavailable after {attempts} attempt(s): {reason}")


class DeliveryError(ParleyError):
    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        self.reason = reason
        self.retry_after = retry_after
        super().__init__(reason)


class Undeliverable(DeliveryError):
    """The platform will never take this reply as it is; it is marked failed at once."""
