"""How many threads the embedded model evaluates a prompt and generates its answer with: every CPU while other
processes leave them idle, half of them (llama-cpp-python's default for generating) while they do not.

llama.cpp's threads wait for one another after every operation of a batch, so one thread that the OS has given to
another process stalls them all. On the project's 2-CPU machine, shared with other work, a LawBench prompt took 3
to 4 times as long with a thread per CPU as with one thread; with the machine otherwise idle, the thread per CPU
was 1.6 times as fast (`benchmarks/prefix_reuse.py`); generating one token at a time gains too (not benchmarked
here: a check by hand, no committed figure). The number of threads changes no result:
the logits are the same bits either way, prompt and generated tokens alike, so the choice is made again before
every call.

What other processes used is read from Linux's `/proc/stat` (all CPUs' busy time, steal included) minus this
process's CPU time, over the time since the previous choice. Where `/proc/stat` is missing, half the CPUs are used.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# Other processes may use this much of a CPU (averaged since the previous prompt) before a prompt gets half the CPUs.
BUSY_ELSEWHERE = 0.5


def busy_seconds() -> float | None:
    """CPU seconds all processes have spent busy since boot, summed over CPUs (None without `/proc/stat`)."""
    try:
        fields = PROC_STAT.read_text(encoding="ascii").split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(value) for value in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    busy = sum(ticks[:8]) - idle  # user nice system idle iowait irq softirq steal (guest time is inside user)
    return busy / os.sysconf("SC_CLK_TCK")


class CpuShare:
    """Chooses the prompt threads from what other processes used since the previous choice (see the module)."""

    def __init__(self, cpus: int | None = None) -> None:
        self.cpus = cpus or os.cpu_count() or 1
        self.half = max(self.cpus // 2, 1)
        self._last = self._sample()
        self.threads = self.half

    def prompt_threads(self) -> int:
        """Threads for the next prompt: every CPU if other processes used less than `BUSY_ELSEWHERE` of a CPU since
        the previous call, else half of them."""
        now = self._sample()
        if now is not None and self._last is not None and now[0] > self._last[0]:
            wall, busy, own = (a - b for a, b in zip(now, self._last, strict=True))
            elsewhere = (busy - own) / wall
            self.threads = self.cpus if elsewhere < BUSY_ELSEWHERE else self.half
        self._last = now
        return self.threads

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        busy = busy_seconds()
        return None if busy is None else (time.monotonic(), busy, time.process_time())
