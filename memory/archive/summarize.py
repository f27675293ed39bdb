"""Writing summaries from the whole text: in parts when it exceeds the summariser's
window, then combined — never truncated.

`ModelSummarizer` asks a language model (any `TextModel`); `ExtractiveSummarizer` needs
none and picks the person's own sentences, for running without a model.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Literal, Protocol

from memory.token_count import TokenCounter, estimate_tokens

Kind = Literal["chunk", "rollup"]

_SYSTEM = (
    "You keep the archive of one long conversation between a person and their assistant. "
    "Write summaries that let the assistant remember it later: who and what came up, "
    "decisions, commitments and dates, preferences, open questions, how things ended. "
    "Past tense, chronological, concrete names and numbers, no filler. Lines in square "
    "brackets are headers written by the gateway: a `source:` header marks text the "
    "person did not type (an operator, a system notice, another app) — never present it "
    "as something the person said."
)

_TASK = {
    "chunk": "Summarise this transcript in about {tokens} tokens.",
    "rollup": "Summarise these consecutive summaries into one of about {tokens} tokens.",
}
_PART = (
    "This is part {index} of {count} of a text too long to read at once. "
    "Summarise this part in about {tokens} tokens; the parts' summaries will be combined."
)
_COMBINE = (
    "These are summaries of consecutive parts of one text, in order. Combine them into "
    "one summary of about {tokens} tokens, covering all parts."
)


class TextModel(Protocol):
    async def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        """One answer to one prompt; raises on failure."""
        ...


class Summarizer(Protocol):
    async def summarize(self, text: str, *, kind: Kind, target_tokens: int) -> str: ...


class ModelSummarizer:
    def __init__(
        self, model: TextModel, *, window_tokens: int, count: TokenCounter = estimate_tokens
    ) -> None:
        # Leave room in the window for the instructions around the text.
        self._window = max(500, window_tokens - 1_000)
        self._model = model
        self._count = count

    async def summarize(self, text: str, *, kind: Kind, target_tokens: int) -> str:
        instruction = _TASK[kind].format(tokens=target_tokens)
        if self._count(text) <= self._window:
            return await self._ask(instruction, text, target_tokens)
        parts = list(split_text(text, self._window, self._count))
        part_target = max(100, min(target_tokens, self._window // (2 * len(parts))))
        summaries = [
            await self._ask(
                _PART.format(index=i, count=len(parts), tokens=part_target), part, part_target
            )
            for i, part in enumerate(parts, 1)
        ]
        combined = "\n\n".join(f"[part {i}]\n{s}" for i, s in enumerate(summaries, 1))
        if self._count(combined) > self._window:
            # Many parts: combine their summaries the same way, in parts.
            return await self.summarize(combined, kind="rollup", target_tokens=target_tokens)
        return await self._ask(_COMBINE.format(tokens=target_tokens), combined, target_tokens)

    async def _ask(self, instruction: str, text: str, target_tokens: int) -> str:
        prompt = f"{instruction}\n\n<text>\n{text}\n</text>"
        answer = (await self._model.complete(_SYSTEM, prompt, target_tokens * 2)).strip()
        if not answer:
            raise ValueError("the summariser returned nothing")
        return answer


def split_text(text: str, limit: int, count: TokenCounter = estimate_tokens) -> Iterator[str]:
    """Consecutive parts of at most `limit` tokens, cut between lines where possible."""
    part: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        for piece in _pieces(line, limit, count):
            cost = count(piece)
            if part and size + cost > limit:
                yield "".join(part)
                part, size = [], 0
            part.append(piece)
            size += cost
    if part:
        yield "".join(part)


def _pieces(line: str, limit: int, count: TokenCounter) -> Iterator[str]:
    if count(line) <= limit:
        yield line
        return
    # One line longer than a part: cut it by characters, conservatively.
    step = max(1, limit * 2)
    for start in range(0, len(line), step):
        yield line[start : start + step]


_HEADER = re.compile(r"^\[(\d{4}-\d{2}-\d{2}) [^\]]*· user[^\]]*\]$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class ExtractiveSummarizer:
    """Without a model: the person's own first sentences, spread evenly over the text."""

    def __init__(self, count: TokenCounter = estimate_tokens) -> None:
        self._count = count

    async def summarize(self, text: str, *, kind: Kind, target_tokens: int) -> str:
        picks = _user_sentences(text) if kind == "chunk" else _first_lines(text)
        if not picks:
            picks = [line for line in text.splitlines() if line.strip()][:1] or ["(empty)"]
        chosen: list[str] = []
        budget = target_tokens
        step = max(1, len(picks) // max(1, target_tokens // 40))
        for line in picks[::step]:
            cost = self._count(line)
            if cost > budget:
                break
            chosen.append(line)
            budget -= cost
        return "\n".join(chosen) or picks[0][: target_tokens * 4]


def _user_sentences(transcript: str) -> list[str]:
    lines = transcript.splitlines()
    picks = []
    for header, body in itertools.pairwise(lines):
        match = _HEADER.match(header)
        if match and body.strip():
            first = _SENTENCE.split(body.strip(), maxsplit=1)[0]
            picks.append(f"{match.group(1)}: the person wrote “{first[:200]}”")
    return picks


def _first_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("[")]
