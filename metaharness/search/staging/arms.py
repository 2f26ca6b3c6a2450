"""An arm of the allocation (a candidate that can be scored on more examples), what its next examples may show,
the solver's answer, and the statistics they rest on: the posterior of a candidate's gain over the reference, the
ladder of evaluation stages."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from metaharness.budget import Spend
from metaharness.errors import InputError

MIN_NOISE = 0.01  # a per-example variance of paired differences below this is not believed (a few examples)


@dataclass(frozen=True)
class Option:
    """Continue an arm to ``target`` examples for ``cost`` (what the added examples are predicted to spend)."""

    target: int
    cost: Spend


@dataclass(frozen=True)
class Outcome:
    """What an arm's target will show, seen from now: its rank (the raw paired gain the return rule compares)
    is Normal(``rank_mean``, ``rank_sd``), its value (posterior mean of its true gain) is ``alpha + beta * rank``,
    and it can be returned only when its rank is above ``returnable_from`` (-inf at the share)."""

    rank_mean: float
    rank_sd: float
    alpha: float
    beta: float
    returnable_from: float


@dataclass(frozen=True)
class Arm:
    """A candidate in the allocation.

    ``mean``/``variance``: posterior of its gain over the reference; ``noise``: the per-example variance of its
    paired differences; ``examples``: how many it has scored (0: no evidence, so it cannot be returned as it is);
    ``share``: the examples that make its score supported; ``options``: the larger targets it may be given, in
    increasing order; ``predicted``: its prior predicted score (what the greedy baselines rank by); ``paired``:
    its paired differences so far, in the example order (their sum is what its raw score adds up to);
    ``fresh``: proposed this iteration.
    """

    id: str
    mean: float
    variance: float
    noise: float
    examples: int
    share: int
    options: tuple[Option, ...]
    predicted: float = 0.0
    paired: tuple[float, ...] = ()
    fresh: bool = True

    def spread(self, target: int) -> float:
        """The sd of its posterior mean after ``target`` examples, seen from now (0 for its current examples)."""
        return spread(self.variance, self.noise, max(0, target - self.examples))

    @property
    def total(self) -> float:
        """The sum of its paired differences over its ``examples`` (any not in ``paired`` counted at its mean)."""
        return float(sum(self.paired)) + max(0, self.examples - len(self.paired)) * self.mean

    @property
    def rank(self) -> float:
        """Its raw paired gain over the whole share as expected now (what the return rule would compare)."""
        n = max(self.share, self.examples, 1)
        return (self.total + (n - self.examples) * self.mean) / n

    @property
    def returnable(self) -> bool:
        """Left as it is, it would be completed and could be returned: it has evidence and a positive mean."""
        return self.examples > 0 and self.mean > 0

    def outcome(self, target: int) -> Outcome:
        """Its `Outcome` at ``target`` examples (module docstring): with ``more`` new examples of paired sum S,
        the posterior mean is ``A + B S`` and the rank ``(total + S + (n - target) (A + B S)) / n``."""
        n, more = max(self.share, 1), target - self.examples
        if more <= 0:
            return Outcome(self.rank, 0.0, self.mean, 0.0, -math.inf if self.returnable else math.inf)
        precision = 1.0 / self.variance + more / self.noise
        a, b = (self.mean / self.variance) / precision, (1.0 / self.noise) / precision
        slope = (1.0 + (n - target) * b) / n  # d rank / d S
        offset = (self.total + (n - target) * a) / n
        sum_sd = math.sqrt(more * more * self.variance + more * self.noise)
        beta = b / slope
        alpha = a - beta * offset
        threshold = -math.inf if target >= n else -alpha / beta
        return Outcome(offset + slope * more * self.mean, slope * sum_sd, alpha, beta, threshold)


@dataclass
class Allocation:
    """A solver's answer: ``targets`` (arm id -> examples it should reach; arms left as they are are absent),
    ``value`` (expected true gain over the reference of the candidate the run will return, price not deducted),
    ``net`` (what the solver maximised: the value's rise over leaving every arm as it is, less the price of the
    example-evaluations), ``cost``, ``status`` ("optimal": proved; "feasible": the best found), ``solver``,
    ``seconds``, ``bound`` (an upper bound of ``net`` over every feasible plan), ``gap`` (``bound - net``: how far
    from optimal the answer may be; 0 when proved), ``truncated`` (the search stopped at its node limit) and
    ``nodes`` (branch-and-bound nodes)."""

    targets: dict[str, int]
    value: float
    cost: Spend
    status: Literal["optimal", "feasible"]
    solver: str
    seconds: float = 0.0
    bound: float | None = None
    nodes: int = 0
    net: float = 0.0
    truncated: bool = False

    @property
    def gap(self) -> float | None:
        """How far below the best feasible plan this one may be (``bound - net``; None without a bound)."""
        return None if self.bound is None else max(0.0, self.bound - self.net)

    def to_json(self) -> dict[str, object]:
        gap = self.gap
        return {
            "targets": dict(self.targets),
            "value": round(self.value, 6),
            "net": round(self.net, 6),
            "cost": self.cost.to_json(),
            "status": self.status,
            "solver": self.solver,
            "seconds": round(self.seconds, 6),
            "bound": None if self.bound is None else round(self.bound, 6),
            "gap": None if gap is None else round(gap, 6),
            "truncated": self.truncated,
            "nodes": self.nodes,
        }


def posterior(
    prior_mean: float, prior_variance: float, paired: Sequence[float], *, noise_prior: float, noise_weight: float = 5.0
) -> tuple[float, float, float]:
    """``(mean, variance, noise)`` of a candidate's gain over the reference after its paired differences.

    ``noise`` (the per-example variance of the differences) is their sample variance shrunk towards
    ``noise_prior`` with the weight of ``noise_weight`` examples, floored at ``MIN_NOISE``; the gain then has a
    Normal prior and a Normal likelihood with that noise (conjugate update).

    >>> mean, variance, noise = posterior(0.0, 0.05**2, [1, 0, 0, 0], noise_prior=0.2)
    >>> round(mean, 3), round(variance ** 0.5, 3), round(noise, 3)
    (0.011, 0.049, 0.219)
    """
    if prior_variance <= 0:
        raise InputError(f"A prior variance must be > 0, got {prior_variance!r}.")
    n = len(paired)
    total = float(sum(paired))
    noise = shrunk_variance(paired, noise_prior, noise_weight) if n > 1 else noise_prior
    noise = max(MIN_NOISE, noise)
    precision = 1.0 / prior_variance + n / noise
    mean = (prior_mean / prior_variance + total / noise) / precision
    return mean, 1.0 / precision, noise


def shrunk_variance(values: Sequence[float], prior: float, weight: float) -> float:
    """The sample variance of ``values`` shrunk towards ``prior`` with the weight of ``weight`` observations (the
    posterior mean of a variance under a scaled inverse-chi-square prior, to first order)."""
    n = len(values)
    if n == 0:
        return prior
    mean = float(sum(values)) / n
    squares = float(sum((v - mean) ** 2 for v in values))
    return (squares + weight * prior) / (n - 1 + weight)


def spread(variance: float, noise: float, more: int) -> float:
    """The preposterior sd of a posterior mean with ``variance`` after ``more`` examples of per-example ``noise``."""
    if more <= 0:
        return 0.0
    after = 1.0 / (1.0 / variance + more / noise)
    return math.sqrt(max(0.0, variance - after))


def stages(share: int, first: int | None = None) -> list[int]:
    """The evaluation ladder of a share of ``share`` examples: doubling from the first stage up to the share.

    >>> stages(50), stages(25), stages(10), stages(50, first=5)
    ([4, 8, 16, 32, 50], [3, 6, 12, 25], [3, 6, 10], [5, 10, 20, 40, 50])
    """
    if share < 1:
        raise InputError(f"The search share must hold at least one example, got {share}.")
    size = first if first is not None else max(3, round(share / 12))
    ladder = []
    while size < share:
        ladder.append(size)
        if size * 2 > 0.8 * share:  # no last stage of a handful of examples
            break
        size *= 2
    return ladder + [share]


def stage_options(examples: int, share: int, per_example: Spend, *, first: int | None = None) -> tuple[Option, ...]:
    """The options of an arm with ``examples`` scored whose every further example costs ``per_example``."""
    return tuple(Option(t, per_example.scaled(t - examples)) for t in stages(share, first) if t > examples)
