"""PARLEY_SECRET_KEY rotates (DESIGN §13): with several keys the first signs and each
one verifies, so putting a new key first keeps every visitor, cursor and dashboard
session; dropping the old key later ends what only it signed. Visitor tokens signed
before keys could rotate stay valid."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import pytest
from pydantic import ValidationError

from connectors.webchat.tokens import VisitorTokens
from gateway.settings import Settings
from tests.support.harness import ADMIN_TOKEN, make_settings, running_gateway
from tests.support.operators import sign_in

OLD = "the-old-key-0123456789abcdefghijklmnop"
NEW = "the-new-key-0123456789abcdefghijklmnop"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def test_a_new_key_first_keeps_what_the_old_signed_and_dropping_it_ends_that(
    database_url: str, tmp_path: Path
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, None, secret_key=OLD)) as gw:
        old_token, _ = await gw.visitor()
        for _ in range(2):
            await gw.visitor()  # people enough for a second page
        first = await gw.http.get("/api/v1/sessions", params={"limit": 1}, headers=ADMIN)
        old_cursor = first.json()["next_cursor"]
        operator = await sign_in(gw)

    rotated = make_settings(database_url, tmp_path, None, secret_key=f"{NEW},{OLD}")
    async with running_gateway(rotated) as gw:
        kept = await gw.http.get(
            "/webchat/messages", headers={"Authorization": f"Bearer {old_token}"}
        )
        paged = await gw.http.get(
            "/api/v1/sessions", params={"limit": 1, "cursor": old_cursor}, headers=ADMIN
        )
        changed = await gw.http.post("/api/v1/pairing/ZZZZZZZZ/approve", headers=operator.headers())
        new_token, _ = await gw.visitor()

    async with running_gateway(make_settings(database_url, tmp_path, None, secret_key=NEW)) as gw:
        ended = await gw.http.get(
            "/webchat/messages", headers={"Authorization": f"Bearer {old_token}"}
        )
        refused = await gw.http.get(
            "/api/v1/sessions", params={"limit": 1, "cursor": old_cursor}, headers=ADMIN
        )
        still = await gw.http.get(
            "/webchat/messages", headers={"Authorization": f"Bearer {new_token}"}
        )

    assert kept.status_code == 200, kept.text
    assert paged.status_code == 200, paged.text
    assert changed.status_code == 404, changed.text  # past the session and CSRF checks
    assert ended.status_code == 401
    assert refused.status_code == 422  # a cursor no key signed
    assert still.status_code == 200  # signed by the new key all along


def test_a_visitor_token_signed_before_keys_rotated_is_still_good() -> None:
    key = b"a-key-from-before-rotation-0123456789"
    visitor = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    digest = hmac.new(key, b"webchat-visitor:" + visitor.encode(), hashlib.sha256).digest()
    token = f"wc1.{visitor}.{base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"

    assert VisitorTokens([b"a-newer-key-0123456789abcdef", key]).verify(token).visitor == visitor
    assert VisitorTokens([key]).issue(visitor) == token  # the same signature as ever


@pytest.mark.parametrize("keys", [f"{NEW},changeme", f"{NEW},short", f"{NEW},,"])
def test_each_key_of_a_rotation_must_be_a_real_secret(keys: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="secret_key"):
        Settings(_env_file=None, data_dir=tmp_path, secret_key=keys)
