"""Schemathesis against the gateway's own OpenAPI document, on SQLite and Postgres.

Every operation the document lists is called with data generated from its schema:
valid data with the right bearer token (the operator's for `/api/v1`, a visitor's for
the web chat), invalid data with the right token, and valid data with whatever
`Authorization` header the generator makes up. No call may get a 5xx or make the
server log an error, and the gateway must be healthy afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import given
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

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
    "GET /api/v1/sessions/{session_id}/messages",
    "POST /webchat/sessions",
    "POST /webchat/messages",
    "GET /webchat/messages",
}


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
        case.validate_response(response, checks=[not_a_server_error])
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
        elif operation.path == "/webchat/messages":
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
