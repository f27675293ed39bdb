"""Schemathesis against the gateway's own OpenAPI document, on SQLite and Postgres.

Every operation the document lists is called with data generated from its schema:
valid data with the right bearer token (the operator's for `/api/v1`, a visitor's for
the web chat), invalid data with the right token, and valid data with whatever
`Authorization` header the generator makes up. No call may get a 5xx or make the
server log an error, no answer to valid data may break its own documented schema, and
the gateway must be healthy afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.support.fuzz.limits import examples
from tests.support.fuzz.server import FuzzServer, fuzz_server
from tests.support.harness import ADMIN_TOKEN

# Examples per operation: valid data with its token, with a made-up Authorization
# header, and invalid data with its token.
AUTHORIZED, UNAUTHORIZED, NEGATIVE = 20, 8, 12
# What the document must list: a new operation is fuzzed too, a vanished one noticed.
OPERATIONS = {
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
    "GET /api/v1/sessions",
    "GET /api/v1/sessions/{session_id}",
    "PATCH /api/v1/sessions/{session_id}",
    "DELETE /api/v1/sessions/{session_id}",
    "GET /api/v1/sessions/{session_id}/messages",
    "POST /api/v1/sessions/{session_id}/messages",
    "GET /api/v1/sessions/{session_id}/search",
    "GET /api/v1/sessions/{session_id}/timeline",
    "GET /api/v1/chunks/{chunk_id}",
    "POST /api/v1/chunks/{chunk_id}/resummarize",
    "GET /api/v1/users/{user_id}/profile",
    "PATCH /api/v1/users/{user_id}/profile",
    "GET /api/v1/users/{user_id}/retired-facts",
    "GET /api/v1/users/{user_id}/profile/changes",
    "GET /api/v1/sessions/{session_id}/lookups",
    "GET /api/v1/stats",
    "GET /api/v1/usage",
    "GET /api/v1/attachments/{attachment_id}",
    "GET /api/v1/users",
    "GET /api/v1/users/{user_id}",
    "PATCH /api/v1/users/{user_id}",
    "POST /api/v1/users/{user_id}/merge",
    "DELETE /api/v1/identities/{identity_id}",
    "DELETE /api/v1/users/{user_id}",
    "GET /api/v1/users/{user_id}/export",
    "GET /api/v1/users/{user_id}/reminders",
    "POST /api/v1/users/{user_id}/reminders",
    "DELETE /api/v1/reminders/{reminder_id}",
    "POST /api/v1/import",
    "GET /api/v1/pairing",
    "POST /api/v1/pairing/{code}/approve",
    "POST /api/v1/pairing/{code}/reject",
    "GET /api/v1/jobs",
    "POST /api/v1/jobs/{job_id}/retry",
    "GET /api/v1/deliveries",
    "POST /api/v1/deliveries/{message_id}/retry",
    "POST /webchat/sessions",
    "POST /webchat/identify",
    "POST /webchat/messages",
    "GET /webchat/messages",
    "POST /webchat/uploads",
    "GET /webchat/attachments/{attachment_id}",
}


# Exports are NDJSON: lines of JSON objects (sometimes with a real header), or bytes.
_RECORD = st.dictionaries(
    st.sampled_from(["type", "format", "version", "text", "seq", "channel"]),
    st.one_of(st.text(max_size=20), st.integers(), st.none()),
    max_size=6,
)
_HEADER = st.builds(
    lambda version: {"format": "parley-export", "version": version, "counts": {}},
    st.integers(min_value=-1, max_value=3),
)
schemathesis.openapi.media_type(
    "application/x-ndjson",
    st.one_of(
        st.binary(max_size=500),
        st.lists(st.one_of(_HEADER, _RECORD), max_size=6).map(
            lambda rows: "\n".join(json.dumps(row) for row in rows).encode()
        ),
    ),
)


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[FuzzServer]:
    with fuzz_server(database_url, tmp_path) as running:
        yield running


def _describe(case: Case[Any]) -> str:
    try:
        return case.as_curl_command()
    except Exception:  # a case so odd it has no curl form: its fields will do
        return repr(case)


def _run(
    server: FuzzServer,
    operation: APIOperation[Any, Any, Any, Any],
    mode: GenerationMode,
    headers: dict[str, str] | None,
    path_parameters: dict[str, str] | None,
    count: int,
) -> None:
    strategy = operation.as_strategy(
        generation_mode=mode, headers=headers, path_parameters=path_parameters
    )

    @examples(count)
    @given(case=strategy)
    def call(case: Case[Any]) -> None:
        server.begin(_describe(case))
        response = case.call(base_url=server.url, timeout=30)
        if response.status_code >= 500:
            raise server.failure(f"{response.status_code} for {_describe(case)}")
        checks: list[Any] = [not_a_server_error]
        if mode is GenerationMode.POSITIVE:
            checks.append(response_schema_conformance)
        case.validate_response(response, checks=checks)
        server.assert_no_errors(_describe(case))

    call()


def test_openapi_operations_never_fail_on_the_server(server: FuzzServer) -> None:
    visitor = server.visitor(seeded=True)
    seeded_session = {"session_id": str(visitor.conversation_id)}
    document = server.request("GET", "/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    assert {operation.label for operation in operations} == OPERATIONS

    failures: list[str] = []
    for operation in operations:
        bearer: dict[str, str] | None = None
        if operation.path.startswith("/api/"):
            bearer = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        elif operation.path.startswith(("/webchat/messages", "/webchat/uploads", "/webchat/att")):
            bearer = {"authorization": f"Bearer {visitor.token}"}
        known = seeded_session if "{session_id}" in operation.path else None
        variants: list[tuple[GenerationMode, dict[str, str] | None, dict[str, str] | None, int]]
        variants = [(GenerationMode.POSITIVE, bearer, known, AUTHORIZED)]
        if bearer is not None:
            variants.append((GenerationMode.POSITIVE, None, None, UNAUTHORIZED))
        if len(operation.query) + len(operation.path_parameters) + len(operation.body):
            variants.append((GenerationMode.NEGATIVE, bearer, None, NEGATIVE))
        for mode, headers, path_parameters, count in variants:
            try:
                _run(server, operation, mode, headers, path_parameters, count)
            except Exception as exc:  # every operation runs; all failures are reported
                failures.append(f"{operation.label} ({mode.value}, auth={bool(headers)}): {exc}")
    assert not failures, "\n\n".join(failures)
