"""How many threads the embedded model gives a prompt: every CPU while other processes leave them idle."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from metaharness.models import cpu_share
from metaharness.models.cpu_share import CpuShare, busy_seconds

TICKS = os.sysconf("SC_CLK_TCK")


class Machine:
    """A fake `/proc/stat` and clocks: `run(seconds, busy, own)` advances them."""

    def __init__(self, path, monkeypatch):
        self.path, self.wall, self.busy, self.own = path, 100.0, 50.0, 5.0
        monkeypatch.setattr(cpu_share, "PROC_STAT", path)
        clock = SimpleNamespace(monotonic=lambda: self.wall, process_time=lambda: self.own)
        monkeypatch.setattr(cpu_share, "time", clock)
        self.write()

    def write(self):
        busy, idle = int(self.busy * TICKS), 10_000_000
        # user nice system idle iowait irq softirq steal guest guest_nice
        self.path.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 ...\n")

    def run(self, seconds, *, busy, own):
        self.wall += seconds
        self.busy += busy
        self.own += own
        self.write()


@pytest.fixture
def machine(tmp_path, monkeypatch):
    return Machine(tmp_path / "stat", monkeypatch)


def test_busy_seconds_reads_proc_stat(machine):
    assert busy_seconds() == pytest.approx(50.0)


def test_every_cpu_while_the_others_are_idle_half_while_they_are_busy(machine):
    share = CpuShare(cpus=4)
    machine.run(10, busy=10, own=10)  # all the busy time was this process's
    assert share.prompt_threads() == 4
    machine.run(10, busy=30, own=20)  # another process used a whole CPU
    assert share.prompt_threads() == 2
    machine.run(10, busy=12, own=10)  # 0.2 of a CPU elsewhere
    assert share.prompt_threads() == 4


def test_half_the_cpus_without_proc_stat(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_share, "PROC_STAT", tmp_path / "missing")
    share = CpuShare(cpus=2)
    assert share.prompt_threads() == 1
