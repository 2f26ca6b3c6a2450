"""The allocation's objective, the return rule's expected value (`Objective`, what the solver maximises; see
`metaharness.search.staging.allocation`), and the expected maximum of posterior means that bounds it
(`MaxOfMeans`, what the branch and bound prunes with)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.special import ndtr, ndtri

from metaharness.budget import Spend
from metaharness.errors import InputError
from metaharness.search.staging.arms import Arm

GRID_POINTS = 256  # quadrature points of the bounds' grid over the range the posterior means can reach
SPREAD_SDS = 8.0  # the bounds' grid reaches this many preposterior sds above the highest mean
NODES = 32  # Gauss-Legendre nodes per arm of the objective's integrals

_LEGENDRE_T, _LEGENDRE_W = np.polynomial.legendre.leggauss(NODES)
_LEGENDRE_T, _LEGENDRE_W = (_LEGENDRE_T + 1.0) / 2.0, _LEGENDRE_W / 2.0  # on (0, 1)


class Objective:
    """The return rule's expected value (module docstring) of any choice of options over ``arms``: every
    (arm, option) pair's `Outcome` as arrays, and the reference and the arms that stay as the floor."""

    def __init__(self, arms: Sequence[Arm]) -> None:
        self.arms = list(arms)
        self.pairs = [(a, o) for a, arm in enumerate(self.arms) for o in range(len(arm.options))]
        self.index = {pair: k for k, pair in enumerate(self.pairs)}
        outcomes = [self.arms[a].outcome(self.arms[a].options[o].target) for a, o in self.pairs]
        self.mu = np.asarray([x.rank_mean for x in outcomes], dtype=float)
        self.sd = np.asarray([max(x.rank_sd, 1e-12) for x in outcomes], dtype=float)
        self.alpha = np.asarray([x.alpha for x in outcomes], dtype=float)
        self.beta = np.asarray([x.beta for x in outcomes], dtype=float)
        self.low = np.asarray([x.returnable_from for x in outcomes], dtype=float)
        self.owner = np.asarray([a for a, _ in self.pairs], dtype=int)
        # the arms that can stay and be returned: (rank, value); -inf rank for the others
        self.stay_rank = np.asarray([arm.rank if arm.returnable else -np.inf for arm in self.arms], dtype=float)
        self.stay_value = np.asarray([arm.mean for arm in self.arms], dtype=float)
        self._cache: dict[float, tuple[np.ndarray, np.ndarray, np.ndarray, dict, dict]] = {}

    def floor(self, chosen: Mapping[int, int]) -> tuple[float, float, int | None]:
        """(rank, value, arm) of the best of the reference (rank 0, value 0, arm None) and the arms that stay."""
        ranks = self.stay_rank.copy()
        ranks[list(chosen)] = -np.inf
        if not len(ranks):
            return 0.0, 0.0, None
        a = int(np.argmax(ranks))
        if ranks[a] > 0.0:
            return float(ranks[a]), float(self.stay_value[a]), a
        return 0.0, 0.0, None

    def cdf(self, ks: np.ndarray, x: np.ndarray) -> np.ndarray:
        """P(rank of pair ``ks[i]``, or -inf where it cannot be returned, <= ``x[i, ...]``), element by element."""
        ks = np.asarray(ks, dtype=int)
        shape = (len(ks),) + (1,) * (x.ndim - 1)
        lifted = np.maximum(x, self.low[ks].reshape(shape))
        return ndtr((lifted - self.mu[ks].reshape(shape)) / self.sd[ks].reshape(shape))

    def _nodes(self, r: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per pair, Gauss-Legendre nodes and weights of E[g(rank) 1{rank > max(r, returnable_from)}] on its
        upper-tail quantile scale (the tail mass q is cut into nodes q t_j), and P(rank <= r) with that floor
        (``[pairs, NODES]``, ``[pairs, NODES]``, ``[pairs]``; cached per floor rank)."""
        if r not in self._cache:
            every = np.arange(len(self.pairs))
            z = (np.maximum(r, self.low) - self.mu) / self.sd
            mass = ndtr(-z)
            q = mass[:, None] * _LEGENDRE_T[None, :]
            x = self.mu[:, None] - self.sd[:, None] * ndtri(np.where(q > 0, q, 0.5))
            w = mass[:, None] * _LEGENDRE_W[None, :]
            self._cache[r] = (x, w, self.cdf(every, np.full(len(every), r)), {}, {})
        x, w, at_floor, _, _ = self._cache[r]
        return x, w, at_floor

    def _column(self, j: int, r: float) -> np.ndarray:
        """P(rank of each pair <= each node of pair ``j``) at floor ``r``: ``[pairs, NODES]`` (cached)."""
        x, _, _ = self._nodes(r)
        columns = self._cache[r][3]
        if j not in columns:
            columns[j] = self.cdf(np.arange(len(self.pairs)), np.broadcast_to(x[j], x.shape))
        return columns[j]

    def _factor(self, j: int, r: float) -> np.ndarray:
        """P(rank of pair ``j`` <= each node of each pair) at floor ``r``: ``[pairs, NODES]`` (cached)."""
        x, _, _ = self._nodes(r)
        factors = self._cache[r][4]
        if j not in factors:
            factors[j] = self.cdf(np.full(len(self.pairs), j), x)
        return factors[j]

    def _terms(self, ks: Sequence[int], r: float) -> np.ndarray:
        """Per chosen pair, each node's weighted value times the chance that no other chosen pair ranks higher
        (``[len(ks), NODES]``)."""
        x, w, _ = self._nodes(r)
        k = np.asarray(ks, dtype=int)
        below = np.stack([self._column(i, r)[k] for i in ks])  # [i, j, node]: P(rank of j <= node of i)
        below[np.arange(len(k)), np.arange(len(k)), :] = 1.0
        return w[k] * (self.alpha[k, None] + self.beta[k, None] * x[k]) * np.prod(below, axis=1)

    def value(self, chosen: Mapping[int, int]) -> float:
        """E[value of the returned candidate] when each arm in ``chosen`` (arm index -> option index) reaches its
        option's target and the others stay."""
        r, v, _ = self.floor(chosen)
        ks = [self.index[pair] for pair in chosen.items()]
        if not ks:
            return v
        _, _, at_floor = self._nodes(r)
        return v * float(np.prod(at_floor[ks])) + float(self._terms(ks, r).sum())

    def gains(self, chosen: Mapping[int, int]) -> np.ndarray:
        """Each pair's marginal gain in ``value`` at ``chosen`` (``nan`` for pairs of chosen arms)."""
        r, v, floor_arm = self.floor(chosen)
        ks = [self.index[pair] for pair in chosen.items()]
        x, w, at_floor = self._nodes(r)
        current = self.value(chosen)
        out = v * float(np.prod(at_floor[ks])) * at_floor
        product = np.ones_like(x)
        if ks:
            for i, term in zip(ks, self._terms(ks, r), strict=True):
                out = out + self._column(i, r) @ term
                product = product * self._factor(i, r)
        out = out + (w * (self.alpha[:, None] + self.beta[:, None] * x) * product).sum(axis=1) - current
        out[np.isin(self.owner, list(chosen))] = np.nan
        if floor_arm is not None:  # choosing the arm that sets the floor moves the floor
            for o in range(len(self.arms[floor_arm].options)):
                out[self.index[(floor_arm, o)]] = self.value({**chosen, floor_arm: o}) - current
        return out


class MaxOfMeans:
    """The bounds' objective: E[max(0, the posterior means after the chosen options, the means of the arms with
    evidence that stay)] tabulated on one grid (each option's preposterior CDF), with trapezoid weights for
    integrals from any lower limit. It is never below the return rule's value (the returned candidate's value is
    one of these means, or the reference's 0), so what bounds it bounds the objective."""

    def __init__(self, arms: Sequence[Arm]) -> None:
        self.arms = list(arms)
        self.pairs = [(a, o) for a, arm in enumerate(self.arms) for o in range(len(arm.options))]
        self.index = {pair: k for k, pair in enumerate(self.pairs)}
        means = np.asarray([self.arms[a].mean for a, _ in self.pairs], dtype=float)
        sds = np.asarray([self.arms[a].spread(self.arms[a].options[o].target) for a, o in self.pairs], dtype=float)
        top = max([0.0, *(arm.mean for arm in self.arms), *(means + SPREAD_SDS * sds)])
        self.grid = np.linspace(0.0, max(top, 1e-9), GRID_POINTS)
        self.h = float(self.grid[1] - self.grid[0])
        safe = np.where(sds > 0, sds, 1.0)
        z = (self.grid[None, :] - means[:, None]) / safe[:, None]
        self.cdf = np.where(sds[:, None] > 0, ndtr(z), (self.grid[None, :] >= means[:, None]).astype(float))
        self.tail = 1.0 - self.cdf  # P(posterior mean after the option > t), per pair and grid point
        self.stay_means = np.asarray([arm.mean if arm.examples > 0 else -np.inf for arm in self.arms], dtype=float)

    def weights(self, low: float) -> np.ndarray:
        """Trapezoid weights of the integral over [low, the grid's end], the partial end cell interpolated."""
        w = np.zeros(GRID_POINTS)
        if low >= self.grid[-1]:
            return w
        low = max(0.0, low)
        j = min(GRID_POINTS - 2, int(low / self.h))
        frac, part = (low - self.grid[j]) / self.h, self.grid[j + 1] - low
        w[j] += part * 0.5 * (1.0 - frac)  # f(low) = (1 - frac) f_j + frac f_(j+1); the cell is [low, t_(j+1)]
        w[j + 1] += part * 0.5 * (1.0 + frac)
        w[j + 1 : GRID_POINTS - 1] += self.h
        w[j + 1] -= self.h / 2
        w[GRID_POINTS - 1] += self.h / 2
        return w

    def floor(self, chosen: Mapping[int, int], staying: np.ndarray) -> float:
        """The best of 0 and the means of the arms with evidence in ``staying`` (arm indices) not in ``chosen``."""
        mask = np.zeros(len(self.arms), dtype=bool)
        mask[staying] = True
        mask[list(chosen)] = False
        return max(0.0, float(np.max(self.stay_means[mask], initial=0.0)))

    def product(self, chosen: Mapping[int, int]) -> np.ndarray:
        """P(no chosen arm's posterior mean exceeds t), per grid point."""
        out = np.ones(GRID_POINTS)
        for a, o in chosen.items():
            out = out * self.cdf[self.index[(a, o)]]
        return out

    def value(self, chosen: Mapping[int, int]) -> float:
        """E[max(0, stayers' means, chosen arms' posterior means)] for ``chosen`` (every other arm stays)."""
        c0 = self.floor(chosen, np.arange(len(self.arms)))
        return c0 + float(self.weights(c0) @ (1.0 - self.product(chosen)))

    def excess(self, chosen: Mapping[int, int], low: float) -> np.ndarray:
        """Per pair, E[(its posterior mean - Z)^+] where Z = max(``low``, the chosen arms' posterior means)."""
        return self.tail @ (self.weights(low) * self.product(chosen))

    def integral(self, f: np.ndarray, points: np.ndarray) -> np.ndarray:
        """The integral of ``f`` (tabulated on the grid) from 0 to each of ``points``: its cumulative trapezoid sum,
        interpolated linearly between grid points (clipped to the grid)."""
        cumulative = np.concatenate(([0.0], np.cumsum((f[1:] + f[:-1]) * (self.h / 2))))
        return np.interp(np.clip(points, 0.0, self.grid[-1]), self.grid, cumulative)


def plan_cost(arms: Sequence[Arm], chosen: Mapping[int, int]) -> Spend:
    total = Spend()
    for a, o in chosen.items():
        total = total + arms[a].options[o].cost
    return total


def value(arms: Sequence[Arm], targets: Mapping[str, int]) -> float:
    """The objective (expected true gain over the reference of the candidate the return rule will return, price
    not deducted) of giving each arm its target in ``targets`` (absent arms stay as they are)."""
    return Objective(arms).value(_chosen(arms, targets))


def _chosen(arms: Sequence[Arm], targets: Mapping[str, int]) -> dict[int, int]:
    by_id = {arm.id: a for a, arm in enumerate(arms)}
    chosen = {}
    for cid, target in targets.items():
        if cid not in by_id:
            raise InputError(f"No arm {cid!r} in the allocation problem.")
        arm = by_id[cid]
        if target == arms[arm].examples:
            continue
        options = [o for o, option in enumerate(arms[arm].options) if option.target == target]
        if not options:
            known = [option.target for option in arms[arm].options]
            raise InputError(f"Arm {cid!r} cannot be continued to {target} examples (its options: {known}).")
        chosen[arm] = options[0]
    return chosen
