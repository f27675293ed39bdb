"""What every request body of the operator API shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Input(BaseModel):
    """A request body: a field it does not define (a typo, or a read-only field such
    as `id`) is refused with a 422, never silently dropped."""

    model_config = ConfigDict(extra="forbid")
