"""The recall benchmark end to end against the scripted fake model: a small chat is
stored, archived (the fake's summaries keep no details), and asked about in all three
modes. The fake can only answer from what it is shown, so an archived detail is
answered in `tools` mode only if the search finds it in the archive, and in `full` mode
only if the whole chat really is in the prompt."""

from __future__ import annotations

import json

from bench.recall import KIND_GROUPS, Options, render, run


async def test_the_fake_run_reports_three_modes_and_the_tools_find_archived_details() -> None:
    options = Options(
        fake=True, messages=120, kinds=("detail", "before"), parallel=2, command="pytest"
    )

    report = await run(options)

    assert report is not None
    assert [m.mode for m in report.modes] == ["timeline", "tools", "full"]
    assert report.questions > 0
    assert report.conversation["archived_statements"] > 0  # the archive did cut and swap
    timeline, tools, full = report.modes
    detail = KIND_GROUPS["detail"]
    assert any(a.archived for a in tools.answers if a.kind == "detail")
    # Each tools-mode turn searched once, then answered from what the search read back.
    assert all(a.tools_used == ["archive_search"] for a in tools.answers)
    assert all(a.model_calls == 2 for a in tools.answers)
    assert tools.tool_calls > 0
    assert timeline.tool_calls == full.tool_calls == 0
    # Timeline mode sees only detail-free summaries of what was archived.
    assert (tools.accuracy_of(detail) or 0) > (timeline.accuracy_of(detail) or 0)
    assert timeline.archived_accuracy == 0.0
    assert full.accuracy == 1.0  # nothing archived or trimmed: every fact in the prompt
    for mode in report.modes:
        assert all(a.model_calls >= 1 and a.estimated_prompt_tokens > 0 for a in mode.answers)
        assert not any(a.notice for a in mode.answers)
        assert mode.token_source == "estimate"  # the fake's usage is a placeholder
    assert json.loads(json.dumps(report.to_json(), default=str))["modes"][1]["tool_calls"] > 0
    assert "FAKE MODEL" in render(report)
