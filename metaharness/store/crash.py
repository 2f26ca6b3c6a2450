"""Named crash points, so tests can SIGKILL a run at an exact moment (between two writes, inside a commit).

Set ``METAHARNESS_CRASH_AT=NAME`` (or ``NAME#N`` for the N-th time the point is reached) and the process kills
itself with SIGKILL there: no cleanup handler runs, exactly as when the machine or the user kills it. Unset (the
normal case) the check is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV_VAR = "METAHARNESS_CRASH_AT"
_hits: Counter[str] = Counter()


def crash_point(name: str) -> None:
    target = os.environ.get(ENV_VAR)
    if not target:
        return
    wanted, _, nth = target.partition("#")
    if wanted != name:
        return
    _hits[name] += 1
    if _hits[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
