"""What a search bought, judged on examples it never saw: the returned candidate against the best seed and a
baseline with no model, paired example by example, with 95% intervals.

A gain that shows only on the examples a search chose by is not a gain. At the end of a run with held-out
examples, the loop scores on the ``judge`` examples (`metaharness.search.staging.ExampleOrder.judge`, never used
to choose anything) the candidate the run returns, the best seed (what the search started from) and the
nearest-neighbour vote of `metaharness.search.baseline` (what the training data says with no model), and logs a
``JudgementLine``: each one's score there and the returned candidate's paired difference over each, with a 95%
bootstrap interval (``RESAMPLES`` resamples of the examples, seeded: the same run gives the same interval).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

RESAMPLES = 2000


@dataclass(frozen=True)
class Judged:
    """One contestant on the judge examples: ``name`` (``returned``, ``best seed``, ``baseline``), the candidate's
    ``id`` (None for the baseline), its ``scores`` per example (in the judge examples' order)."""

    name: str
    id: str | None
    scores: tuple[float, ...]

    @property
    def score(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0


def paired_interval(
    a: Sequence[float], b: Sequence[float], *, seed: int = 0, resamples: int = RESAMPLES
) -> tuple[float, float, float]:
    """The mean of ``a - b`` over paired examples and its 95% percentile-bootstrap interval (low, high)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired scores need the same examples, got {len(a)} and {len(b)}")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    rng = random.Random(f"judgement:{seed}")
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return sum(diffs) / n, means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def comparisons(returned: Judged, others: Sequence[Judged]) -> list[dict[str, object]]:
    """The returned candidate's paired difference over each of ``others``: mean, 95% interval, and whether the
    interval lies above 0."""
    out: list[dict[str, object]] = []
    for other in others:
        mean, low, high = paired_interval(returned.scores, other.scores)
        out.append(
            {
                "over": other.name,
                "id": other.id,
                "difference": round(mean, 4),
                "interval": [round(low, 4), round(high, 4)],
                "above_zero": low > 0,
            }
        )
    return out
