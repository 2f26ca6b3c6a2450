"""The run's validation examples in one seeded order (`ExampleOrder`): the search's share first, then the examples
held out of the search, a fifth of them to choose the candidate the run returns (``confirm``), the rest to judge
it (``judge``), with any examples that only judge (``judge_only``: training examples the run withholds,
`metaharness.search.withheld`). Two candidates' first examples are the same examples, so every comparison is
paired."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass

from metaharness.errors import InputError

# Held out of the search by default: half the validation examples (25 of 50), unless there are fewer than 10. The
# judge examples are what tell a gain from noise (benchmarks/judge_power.py), so they get the larger part.
HOLDOUT_SHARE = 0.5
MIN_HOLDOUT_EXAMPLES = 10


@dataclass(frozen=True)
class ExampleOrder:
    """The run's validation examples in one seeded order: the search's ``share`` first, then ``holdout``, examples
    no proposer ever sees in a trace, a score or a workspace: its first fifth (``confirm``) chooses the candidate the
    run returns among the search's best, the rest (``judge``) scores what it returns, once chosen, with the
    ``judge_only`` examples after them."""

    search: tuple[str, ...]
    holdout: tuple[str, ...] = ()
    judge_only: tuple[str, ...] = ()

    @classmethod
    def of(cls, ids: Sequence[str], *, seed: int, holdout: int = 0) -> ExampleOrder:
        """``ids`` (the evaluator's validation ids, in split order) shuffled with ``seed``; the last ``holdout``
        are held out. InputError when fewer than one example would be left to search."""
        if holdout < 0:
            raise InputError(f"--holdout must be >= 0, got {holdout}.")
        if len(ids) - holdout < 1:
            raise InputError(
                f"--holdout {holdout} leaves no validation example to search ({len(ids)} in all): hold out fewer."
            )
        order = list(ids)
        random.Random(f"example-order:{seed}").shuffle(order)
        cut = len(order) - holdout
        return cls(tuple(order[:cut]), tuple(order[cut:]))

    @classmethod
    def split(
        cls,
        ids: Sequence[str],
        *,
        seed: int,
        limit: int | None = None,
        holdout: int | None = None,
        judge_only: Sequence[str] = (),
    ) -> ExampleOrder:
        """A run's order over its task's validation ``ids`` (split order): the search's share is the first ``limit``
        of them (all when None; the order of `of`), and ``holdout`` more are held out: from the examples after the
        first ``limit`` when there are any, else the last of the order. ``holdout`` None: `auto_holdout`. The
        ``judge_only`` ids among ``ids`` take no part in that: they only judge, after the held-out judge examples."""
        if judge_only:
            only = set(judge_only)
            order = cls.split([i for i in ids if i not in only], seed=seed, limit=limit, holdout=holdout)
            return dataclasses.replace(order, judge_only=tuple(i for i in ids if i in only))
        held = auto_holdout(len(ids), limit) if holdout is None else holdout
        if limit is None or limit >= len(ids):
            return cls.of(ids, seed=seed, holdout=held)
        if held < 0:
            raise InputError(f"--holdout must be >= 0, got {held}.")
        if held > len(ids) - limit:
            raise InputError(
                f"--holdout {held} with --val-limit {limit}: only {len(ids) - limit} of the {len(ids)} validation "
                "examples are left outside the search's; hold out fewer or search on fewer."
            )
        search = cls.of(ids[:limit], seed=seed).search
        rest = list(ids[limit:])
        random.Random(f"holdout-order:{seed}").shuffle(rest)
        return cls(search, tuple(rest[:held]))

    @property
    def confirm(self) -> tuple[str, ...]:
        """The held-out examples that choose the returned candidate among the search's best (a fifth)."""
        return self.holdout[: confirm_size(len(self.holdout))]

    @property
    def judge(self) -> tuple[str, ...]:
        """The held-out examples that score the returned candidate, never used to choose it (``judge_only`` last)."""
        return self.holdout[confirm_size(len(self.holdout)) :] + self.judge_only

    @property
    def share(self) -> int:
        return len(self.search)

    def next_ids(self, scored: Sequence[str], count: int) -> list[str]:
        """The first ``count`` search examples not in ``scored``, in order."""
        done = set(scored)
        return [i for i in self.search if i not in done][:count]


def auto_holdout(examples: int, limit: int | None = None) -> int:
    """The validation examples a run holds out when none is said: ``HOLDOUT_SHARE`` of them (none with fewer than
    ``MIN_HOLDOUT_EXAMPLES`` in all), at most what the search's ``limit`` leaves."""
    if examples < MIN_HOLDOUT_EXAMPLES:
        return 0
    wanted = round(HOLDOUT_SHARE * examples)
    return min(wanted, examples - limit) if limit is not None and limit < examples else wanted


def confirm_size(holdout: int) -> int:
    """How many of ``holdout`` held-out examples choose the returned candidate: a fifth (at least one of two). They
    choose between two contenders only; the rest judge, and a judgement's interval narrows with their number."""
    return max(1, holdout // 5) if holdout >= 2 else 0
