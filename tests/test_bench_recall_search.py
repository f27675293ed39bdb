"""The archive_search benchmark at a small size, on each backend: the conversation it
builds answers its questions as the bench says (the words planted where it says, the
common word left out of the fallback), and the report names the machine and command."""

from __future__ import annotations

from bench.recall_search import QUERIES, RARE_COUNT, Options, render, run


async def test_the_bench_asks_what_it_says_and_reports_both_ways(database_url: str) -> None:
    postgres = None if database_url.startswith("sqlite") else database_url
    options = Options(
        messages=400, chunks=4, repetitions=2, warmup=0, postgres_url=postgres, as_json=False
    )

    report = await run(options, command="pytest")

    assert list(report["databases"]) == ["sqlite"] + ([] if postgres is None else ["postgresql"])
    for figures in report["databases"].values():
        queries = figures["queries"]
        assert list(queries) == list(QUERIES)
        assert queries["all words"]["answer_hits"] == 8  # 12 said together, 8 shown
        assert queries["all words"]["answer_first_line"].startswith("The 8 best of 12 messages")
        assert queries["rare word"]["answer_hits"] == RARE_COUNT
        fallback = queries["common-word fallback"]
        assert fallback["answer_hits"] == fallback["rest_hits"] == 0
        assert "not searched for alone: the" in fallback["answer_first_line"]
        assert queries["common word alone"]["rest_hits"] == 21  # a full REST page
        for query in queries.values():
            timings = query["timings"]
            assert set(timings) == {"archive_search", "rest_search"}
            assert all(t["p50_ms"] > 0 for t in timings.values())
    shown = render(report)
    assert "command: pytest" in shown
    assert "CPUs" in shown
