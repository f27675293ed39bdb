"""Chat commands: what a person can ask the gateway itself (`/status`, `/link`, …),
answered in the turn order of their conversation, never by the model.

One module per family of commands: a class built with what its commands need, whose
`commands()` gives each as a `Command` (name, handler, `/help` line). `services.py`
registers every family once in the one `Commands` registry, which the turn runner asks
and `/help` lists. A new command is a new module here and one entry there.
"""

from __future__ import annotations

from gateway.commands.registry import (
    Command,
    Commands,
    Family,
    Handler,
    Invocation,
    NotACommand,
)

__all__ = ["Command", "Commands", "Family", "Handler", "Invocation", "NotACommand"]
