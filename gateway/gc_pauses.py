"""How long the garbage collector held the process, for /metrics.

Each collection stops every thread, the event loop's too, for as long as it walks its
generation. Young ones are short; a full one walks everything alive, and a gateway with
thousands of open sockets holds over a million objects: a second or more, during which
nothing is answered or delivered (bench/README.md, "Idle web chat sockets"). Operators
see that here rather than as unexplained latency.

The collector calls back from inside an allocation of whichever thread set it off, so
the callback only adds to counts of its own (no lock, no allocation of tracked objects:
it cannot set off a collection of its own or wait on a lock its thread holds). A scrape
reads them.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# Seconds: a young collection takes well under a millisecond; a full one at many
# sockets, seconds.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GENERATIONS = 3


class GcPauses(Collector):
    def __init__(self) -> None:
        # Per generation: collections per bucket (the last: over the largest), seconds.
        self._counts = [[0] * (len(BUCKETS) + 1) for _ in range(GENERATIONS)]
        self._seconds = [0.0] * GENERATIONS
        self._began = 0.0

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Time the process's collections while inside."""
        gc.callbacks.append(self._on_collection)
        try:
            yield
        finally:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        generation = info["generation"]
        self._seconds[generation] += took
        self._counts[generation][bisect.bisect_left(BUCKETS, took)] += 1

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "parley_gc_pause_seconds",
            "Garbage collections of this process while the gateway ran, by generation "
            "(2: a full one, which walks every object alive), and how long each held "
            "every thread, the event loop's included.",
            labels=["generation"],
        )
        for generation in range(GENERATIONS):
            counts = self._counts[generation]
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([str(generation)], buckets, self._seconds[generation])
        yield family
