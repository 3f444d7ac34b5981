"""Run a Python module with its stacks sampled by CPU time, not by wall time.

py-spy samples a thread whenever it is not idle, which on a loaded machine includes the time it
sits preempted: an extender that answers kube-scheduler wakes the scheduler's goroutine on the
same two cores, the kernel switches to it inside the extender's socket write, and py-spy charges
that wait to the write (about 40% of its samples on the real scheduler). SIGPROF, from
ITIMER_PROF, fires after each interval of the process's own CPU time (user and system), so these
samples add up to what the process spent.

Signals reach Python between bytecodes, so the CPU of a C call (uvloop's loop, a socket read, an
orjson decode) lands on the Python frame that runs next after it: read the figures by area, not
by line.

    python bench/cpu_sampler.py OUT.txt -m gpupair.command.cli extender ...

OUT.txt gets collapsed stacks (``frame;frame;frame count``, py-spy's raw format) when the module
exits, SIGTERM included (gpupair's services drain and return). SIGUSR1 forgets the samples so far:
a bench sends it when the part it measures begins, after the imports and the first lists.
"""

from __future__ import annotations

import atexit
import collections
import runpy
import signal
import sys
from types import FrameType

INTERVAL = 0.001  # seconds of CPU between samples


def _stack(frame: FrameType | None) -> str:
    names = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{code.co_qualname} ({code.co_filename.rsplit('site-packages/', 1)[-1]})")
        frame = frame.f_back
    return ";".join(reversed(names))


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "-m":
        sys.exit("usage: cpu_sampler.py OUT.txt -m MODULE [ARGS...]")
    out, module = argv[0], argv[2]
    samples: collections.Counter[str] = collections.Counter()
    signal.signal(signal.SIGPROF, lambda _sig, frame: samples.update((_stack(frame),)))
    signal.signal(signal.SIGUSR1, lambda _sig, _frame: samples.clear())

    def write() -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        with open(out, "w") as f:
            f.writelines(f"{stack} {count}\n" for stack, count in samples.most_common())

    atexit.register(write)
    signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)
    sys.argv = [module, *argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
