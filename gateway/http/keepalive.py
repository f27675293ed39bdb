"""WebSocket keep-alive pings from one timer for all sockets.

uvicorn's own keep-alive gives every socket a timer for its next ping, renewed at each
pong: a `TimerHandle`, a `UVTimer`, the callback's bound method and a `Context`, objects
the garbage collector tracks. Each renewal frees the old ones and makes new ones, so at
10,000 idle sockets the youngest generation filled with some 40,000 objects while its
count (allocations less deallocations) stayed near nought, and the first burst of
allocations after a quiet while collected them all at once: 50-70 ms on whatever ran
next, a delivery (bench.idle_sockets).

Here a socket's next ping waits in a set by the slot it falls in (a thirtieth of the
interval: a second at 30 s), and one timer wakes for the earliest slot and pings its
sockets together. Nothing that lives is allocated for it, and the loop wakes once a slot
rather than once a socket. A slot's pings and pongs still leave websockets' parser state
behind; with slots of a second the young generation was collected a little at a time
while idle, where slots of a tenth of that left it growing until a delivery paid 40 ms
for it (bench/README.md, which also says why that likely is).

The ping itself, the pong's deadline and the close on a missed pong stay uvicorn's.
"""

from __future__ import annotations

import asyncio
import math

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

# A ping is late by at most this share of the interval.
SLOTS_PER_INTERVAL = 30


class PingWheel:
    """Sockets due for a ping, in sets by the slot (`resolution` seconds of the loop's
    clock) that their ping falls in."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resolution: float) -> None:
        self.loop = loop
        self.resolution = resolution
        self._due: dict[int, set[SharedKeepalive]] = {}
        self._slot: dict[SharedKeepalive, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0

    @property
    def held(self) -> int:
        """Sockets waiting for their next ping."""
        return len(self._slot)

    def add(self, socket: SharedKeepalive, at: float) -> None:
        """Ping `socket` at loop time `at`, or within the slot after it."""
        self.discard(socket)
        slot = math.ceil(at / self.resolution)
        sockets = self._due.get(slot)
        if sockets is None:
            sockets = self._due[slot] = set()
        sockets.add(socket)
        self._slot[socket] = slot
        if self._timer is None or slot < self._timer_at:
            self._arm(slot)

    def discard(self, socket: SharedKeepalive) -> None:
        slot = self._slot.pop(socket, None)
        if slot is None:
            return
        sockets = self._due.get(slot)
        if sockets is not None:  # None: its slot is being pinged right now
            sockets.discard(socket)
            if not sockets:
                del self._due[slot]

    def _arm(self, slot: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(slot * self.resolution, self._ping_due)
        self._timer_at = slot

    def _ping_due(self) -> None:
        self._timer = None
        # A timer may fire a hair before its time by the loop's clock.
        until = max(self.loop.time() / self.resolution, self._timer_at)
        for slot in sorted(slot for slot in self._due if slot <= until):
            for socket in self._due.pop(slot):
                del self._slot[socket]
                try:
                    # uvicorn's: sends the ping, then waits for the pong or closes.
                    socket.send_keepalive_ping()
                except Exception as exc:  # one socket's failure is not the others'
                    self.loop.call_exception_handler(
                        {"message": "a keep-alive ping failed", "exception": exc}
                    )
        if self._due:
            self._arm(min(self._due))


class SharedKeepalive(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, its next ping waiting in the loop's wheel."""

    _wheel: PingWheel | None = None

    def schedule_ping(self) -> None:
        assert self.ping_interval is not None
        delay = max(0.0, self.ping_interval - self.last_ping_rtt)
        self.wheel().add(self, self.loop.time() + delay)

    def stop_keepalive(self) -> None:
        wheel = type(self)._wheel
        if wheel is not None:
            wheel.discard(self)
        super().stop_keepalive()

    def wheel(self) -> PingWheel:
        """The wheel of this protocol class on this socket's loop (a server's one loop)."""
        wheel = type(self)._wheel
        if wheel is None or wheel.loop is not self.loop:
            assert self.ping_interval is not None
            resolution = self.ping_interval / SLOTS_PER_INTERVAL
            wheel = type(self)._wheel = PingWheel(self.loop, resolution)
        return wheel


def keepalive_protocol() -> type[SharedKeepalive]:
    """A protocol class of its own for one server, so each server has its wheel."""
    return type("SharedKeepalive", (SharedKeepalive,), {})
