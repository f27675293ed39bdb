"""The live turns of recent conversations, kept rendered between their turns.

The answerer renders a turn's live window through the conversation's `LiveRendering`
(memory.context), which renders and counts only the messages that are new since its
last turn. Which messages those are is the live window's business (kept and checked in
memory.storage.live_window); a rendering only checks that the window it is handed
starts with the one it rendered, so it is never more right or wrong than its input.
Bounded as the kept windows are: least recently used conversations go first.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

from memory.context import LiveRendering
from memory.storage.conversations import TurnState
from memory.storage.live_window import MAX_CONVERSATIONS


class KeptRenderings:
    def __init__(self, *, max_conversations: int = MAX_CONVERSATIONS) -> None:
        self._max_conversations = max_conversations
        self._kept: OrderedDict[uuid.UUID, LiveRendering] = OrderedDict()

    def render(self, state: TurnState) -> LiveRendering:
        """The conversation's rendering, brought up to `state.live`."""
        rendering = self._kept.pop(state.conversation_id, None)
        if (
            rendering is None
            or rendering.timezone != state.timezone
            or rendering.group != state.group
        ):
            rendering = LiveRendering(state.timezone, state.group)
        rendering.update(state.live)
        self._kept[state.conversation_id] = rendering
        while len(self._kept) > self._max_conversations:
            self._kept.popitem(last=False)
        return rendering

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._kept

    def forget(self, conversation_id: uuid.UUID) -> None:
        self._kept.pop(conversation_id, None)

    def __len__(self) -> int:
        return len(self._kept)
