"""The keys that sign tokens and the admin token: from their settings, else created
once in the data dir (0600).

A file in the data dir is one replica's own; replicas share a database server, so on one
the key must come from the setting (and so should the admin token, or each replica has
its own).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from itsdangerous import Signer
from pydantic import SecretStr

from gateway.errors import ConfigError
from gateway.settings import Settings
from memory.storage.files import FILE_MODE, private_dir, tighten

KEY_FILE = "secret_key"
ADMIN_TOKEN_FILE = "admin_token"


def require_shared_key(settings: Settings) -> None:
    """Refuse to serve from a database server without the key every replica shares."""
    if settings.secret_key is None and not settings.is_sqlite:
        raise ConfigError(
            "PARLEY_SECRET_KEY must be set when the database is not SQLite: every replica "
            "must sign web chat tokens with the same key"
        )


def signing_keys(settings: Settings) -> tuple[bytes, ...]:
    return keys_from(settings.secret_key, settings.data_dir)


def keys_from(secret_key: SecretStr | None, data_dir: Path) -> tuple[bytes, ...]:
    """The keys `signing_keys` reads, from the two settings they come from (what the
    web chat is handed, without the rest of the settings): the first signs, each one
    verifies."""
    if secret_key is not None:
        keys = (key.strip() for key in secret_key.get_secret_value().split(","))
        return tuple(key.encode() for key in keys if key)
    path = private_dir(data_dir) / KEY_FILE
    if path.exists():
        tighten(path)  # say, restored from a backup with looser modes
        return (path.read_bytes().strip(),)
    return (_create(path),)


def signer(keys: Sequence[bytes], purpose: str) -> Signer:
    """Signs with the first of `keys` and accepts a signature by any (itsdangerous); a
    key of its own per `purpose`, so nothing signed for one passes for another."""
    # itsdangerous signs with the last key it is given.
    return Signer(list(reversed(keys)), salt=purpose, digest_method=hashlib.sha256)


def with_admin_token(settings: Settings) -> Settings:
    """`settings` with an admin token: PARLEY_ADMIN_TOKEN if set, else the data dir's
    (made on first use), so a first run has a dashboard to sign in to."""
    if settings.admin_token is not None:
        return settings
    path = private_dir(settings.data_dir) / ADMIN_TOKEN_FILE
    if path.exists():
        tighten(path)
        token = path.read_bytes().strip()
    else:
        token = _create(path)
    return settings.model_copy(update={"admin_token": SecretStr(token.decode())})


def _create(path: Path) -> bytes:
    key = secrets.token_urlsafe(48).encode()
    # O_EXCL: if two processes race, one writes and both read the same key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key
