"""What a whole run reports (``RunEvents``): the loop's events, and before them the settings the run resolved."""

from __future__ import annotations

from metaharness.runner.settings import RunSettings
from metaharness.search.loop import LoopEvents


class RunEvents(LoopEvents):
    """The loop's events (``metaharness.search.loop.LoopEvents``) and ``settings_resolved``, which ``optimize``
    calls once the run's settings are resolved, before the run directory is touched. The defaults do nothing."""

    def settings_resolved(self, settings: RunSettings) -> None: ...
