"""Fuzzing support for `tests/test_fuzz.py` and `tests/test_fuzz_openapi.py`.

- `limits`: the fuzzed gateway's limits and each test's example budget.
- `strategies`, `webchat_inputs`, `platform_cases`: hostile input, generic and per edge.
- `oracle`, `cleaning`: what the gateway must answer, and what it must store.
- `gateway_lines`: which lines a model would take for the gateway's own.
- `server`, `error_log`: a real gateway on its own event loop, its error log captured.
"""
