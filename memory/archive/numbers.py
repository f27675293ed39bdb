"""The memory numbers, scaled to the model's context window.

The defaults suit a 128k-token model. A smaller window shrinks the live limit, chunk
size, summary length and rows kept in proportion, so the prompt still fits.
"""

from __future__ import annotations

from dataclasses import dataclass

REFERENCE_CONTEXT_TOKENS = 128_000


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    live_window_tokens: int = 20_000
    chunk_tokens: int = 10_000
    chunk_min_tokens: int = 5_000
    summary_tokens: int = 1_500
    # How much text one summarising call may read; longer text goes in parts.
    summary_window_tokens: int = 100_000
    consolidate_at: int = 6
    consolidate_count: int = 4
    rollup_keep: int = 5
    rollup_batch: int = 5

    def scaled(self, context_tokens: int) -> MemoryLimits:
        factor = min(1.0, context_tokens / REFERENCE_CONTEXT_TOKENS)
        if factor == 1.0:
            return self
        return MemoryLimits(
            live_window_tokens=int(self.live_window_tokens * factor),
            chunk_tokens=int(self.chunk_tokens * factor),
            chunk_min_tokens=int(self.chunk_min_tokens * factor),
            summary_tokens=max(50, int(self.summary_tokens * factor)),
            summary_window_tokens=min(self.summary_window_tokens, context_tokens // 2),
            consolidate_at=self.consolidate_at,
            consolidate_count=self.consolidate_count,
            rollup_keep=max(2, round(self.rollup_keep * factor)),
            rollup_batch=self.rollup_batch,
        )

    def summary_tokens_at(self, level: int) -> int:
        """Older is coarser: from level 2 up each level's summaries are half as long as
        the level below (down to a sixteenth), so the timeline's size stays bounded
        however many levels a long history needs."""
        if level <= 1:
            return self.summary_tokens
        return max(self.summary_tokens // 16, self.summary_tokens >> (level - 1))

    def max_timeline_tokens(self, levels: int, row_overhead: int = 30) -> int:
        """The most tokens the timeline rows can take with `levels` levels above 0."""
        level_zero = (self.consolidate_at - 1) + self.consolidate_count
        per_level = (self.rollup_keep + self.rollup_batch - 1) + self.rollup_batch
        rows = level_zero * (self.summary_tokens + row_overhead)
        for level in range(1, levels + 1):
            rows += per_level * (self.summary_tokens_at(level) + row_overhead)
        return rows

    def max_timeline_rows(self, levels: int) -> int:
        """Rows the timeline can hold with `levels` levels above 0 (see archive.py)."""
        level_zero = (self.consolidate_at - 1) + self.consolidate_count
        per_level = (self.rollup_keep + self.rollup_batch - 1) + self.rollup_batch
        return level_zero + per_level * levels
