"""Run a module with cProfile switched on and off by signals:
`python -m bench.profiled OUT -m MODULE [ARGS...]`.

SIGUSR2 starts profiling the main thread (the event loop's), SIGUSR1 stops it and
writes the stats gathered so far to OUT (pstats format), so a benchmark profiles only
its measured segments, not start-up or the baseline's turns.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
from types import FrameType


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit("usage: python -m bench.profiled OUT -m MODULE [ARGS...]")
    out, module = sys.argv[1], sys.argv[3]
    profile = cProfile.Profile()

    def start(signum: int, frame: FrameType | None) -> None:
        profile.enable()

    def stop(signum: int, frame: FrameType | None) -> None:
        profile.disable()
        profile.dump_stats(out)

    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGUSR1, stop)
    sys.argv = [module, *sys.argv[4:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
