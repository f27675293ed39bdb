"""python-telegram-bot errors as Parley's delivery errors."""

from __future__ import annotations

import warnings

from telegram.error import BadRequest, Forbidden, InvalidToken, RetryAfter, TelegramError
from telegram.warnings import PTBDeprecationWarning

from gateway.sdk import DeliveryError, FileUnavailable, MediaRefused, Undeliverable, server_wait


def retry_after_seconds(exc: RetryAfter) -> float:
    # PTB 22 warns that `retry_after` will become a timedelta; either way we want seconds.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    seconds = float(value) if isinstance(value, int | float) else value.total_seconds()
    # Telegram's number, but still a number from outside: bounded like any other.
    return server_wait(seconds) or 0.0


def delivery_error(exc: TelegramError) -> DeliveryError:
    """Flood control carries its wait; refusals (blocked, bad request) are final;
    everything else (network, 5xx) is worth another try."""
    if isinstance(exc, RetryAfter):
        return DeliveryError(
            f"Telegram flood control: {exc.message}", retry_after=retry_after_seconds(exc)
        )
    if isinstance(exc, Forbidden | BadRequest | InvalidToken):
        return Undeliverable(f"Telegram refused the message: {exc.message}")
    return DeliveryError(f"Telegram did not take the message: {exc.message}")


def file_error(exc: TelegramError) -> FileUnavailable | MediaRefused:
    """A file Telegram did not give: past its bots' 20 MB, gone or refused for good,
    or worth another try (flood control, network, 5xx). Only Telegram's description is
    kept: a download's URL holds the token."""
    if isinstance(exc, BadRequest) and "too big" in exc.message.lower():
        return MediaRefused("too_large", "Telegram gives bots files of at most 20 MB")
    if isinstance(exc, Forbidden | BadRequest | InvalidToken):
        return FileUnavailable(f"Telegram refused the file: {exc.message}", transient=False)
    return FileUnavailable(f"Telegram did not give the file ({type(exc).__name__})", transient=True)
