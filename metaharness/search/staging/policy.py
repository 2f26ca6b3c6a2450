"""The seam between the loop and a rule of staged evaluation: the `Policy` protocol, the `Round` a policy returns,
the registry of policies by name (`register`, `get_policy`) and `decide`, what the loop calls each round."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from metaharness.budget import Spend
from metaharness.errors import InputError
from metaharness.search.staging.allocation import AllocationSolver
from metaharness.search.staging.arms import Allocation
from metaharness.search.staging.standing import Standing

# The baselines whose choice in the same standing every round of a compared policy records (`Round.alternatives`).
COMPARED_WITH = ("greedy", "halving")


@dataclass
class Round:
    """One round's decision: the targets to reach now (``steps``, candidate id -> examples; the examples are the
    next ones of the order, or ``ids[candidate]`` when given), why (``rule``), the solver's full answer when there
    was one (its optimality gap, and whether its search was cut short), the predicted cost of the steps, what the
    baselines would have chosen in the same standing (``alternatives``) and the candidates merged into others
    (``merged``)."""

    steps: dict[str, int]
    rule: str
    predicted: Spend
    allocation: Allocation | None = None
    ids: dict[str, list[str]] = field(default_factory=dict)
    alternatives: dict[str, dict[str, int]] = field(default_factory=dict)
    merged: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"steps": dict(self.steps), "rule": self.rule, "predicted": self.predicted.to_json()}
        if self.ids:
            out["ids"] = {k: list(v) for k, v in self.ids.items()}
        if self.allocation is not None:
            out["allocation"] = self.allocation.to_json()
        if self.alternatives:
            out["alternatives"] = {k: dict(v) for k, v in self.alternatives.items()}
        if self.merged:
            out["merged"] = {k: list(v) for k, v in self.merged.items()}
        return out


class Policy(Protocol):
    """A rule of staged evaluation: in the standing of an iteration, which candidates get how many more validation
    examples now. The loop asks it round after round, scoring what each round chose before asking again, until a
    round chooses nothing. The whole contract:

    - ``name``: what a user types to choose it (``--evaluation NAME``, settings.json's ``evaluation``); unique
      among the registered policies (`register`).
    - ``reads_predictions``: False when the rule reads no prediction: it is then given `Standing.blind` (every
      candidate's prediction removed, costs from measured ancestors), so its rounds cannot depend on one.
    - ``asks_predictions``: whether the proposer serving it is asked for predictions (``RunState.predictions``, and
      a share of the iteration's budget to make them): True for a rule that reads them, and for one that does not
      but whose runs record them (``all``). The policies that ask for none are `prediction_free` (baselines that
      pay nothing for predicting).
    - ``merges``: False when the rule scores every candidate in full whatever its outputs (``all``, which records
      every outcome): it is then given `Standing.unmerged`, in which no candidate is merged into another. True for
      the others: a candidate whose outputs equal another's is no arm of theirs (``Round.merged``).
    - ``compared``: whether each of its rounds records what greedy and halving would choose in the same standing
      (``Round.alternatives``).
    - ``decide(standing, solver) -> Round``: the next round. ``Round.steps`` maps ids of ``standing.arms`` that
      have options left to the number of examples each is to reach now (more than it has, at most its share), on
      the next examples of ``standing.order`` or on ``Round.ids[id]`` when given; ``Round.predicted`` is their
      predicted cost, which together fits ``standing.left`` (`Standing.cost_to`). Empty steps: this iteration's
      evaluation is done. The same standing gives the same round (a rule that draws at random seeds its draws
      from the standing). ``solver`` is the allocation solver (`metaharness.search.staging.allocation.allocate`)
      for a rule that solves one; the others ignore it.

    Errors: ``decide`` never raises for what a standing holds: a candidate it cannot afford or score is left out,
    and a round with no step ends the iteration's evaluation. An unknown name raises ``InputError`` from
    `get_policy` (and `decide`), naming the registered ones; anything else is a bug and raises.
    """

    name: str
    reads_predictions: bool
    asks_predictions: bool
    merges: bool
    compared: bool

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round: ...


_REGISTERED: dict[str, Policy] = {}


def register(rule: Policy) -> Policy:
    """Make ``rule`` choosable by its name (its module calls this beside its definition); returns it. A second
    policy of the same name is a bug (ValueError)."""
    if rule.name in _REGISTERED:
        raise ValueError(f"an evaluation policy named {rule.name!r} is registered already")
    _REGISTERED[rule.name] = rule
    return rule


def policy_names() -> tuple[str, ...]:
    """The registered policies' names, in the order they were registered."""
    return tuple(_REGISTERED)


def get_policy(name: str) -> Policy:
    """The registered policy called ``name``; InputError naming the registered ones when there is none."""
    found = _REGISTERED.get(name)
    if found is None:
        raise InputError(f"Unknown evaluation policy {name!r}; use one of {', '.join(_REGISTERED)}.")
    return found


def prediction_free() -> frozenset[str]:
    """The names of the registered policies that ask for no prediction (`Policy.asks_predictions`)."""
    return frozenset(name for name, rule in _REGISTERED.items() if not rule.asks_predictions)


def decide(standing: Standing, rule: str | Policy, *, solver: AllocationSolver = "auto", compare: bool = True) -> Round:
    """The next round of ``rule`` (a policy or its name) in ``standing`` (`Policy.decide`, given the blind
    standing when the rule reads no prediction), with the candidates merged into others (``Round.merged``) and,
    with ``compare`` for a compared rule after the seeds, what the baselines would choose now
    (``Round.alternatives``)."""
    chosen = get_policy(rule) if isinstance(rule, str) else rule
    view = _view(chosen, standing)
    decision = chosen.decide(view, solver)
    if compare and chosen.compared and standing.iteration > 0 and standing.arms:
        decision.alternatives = alternatives(standing)
    decision.merged = dict(view.merged)
    return decision


def alternatives(standing: Standing) -> dict[str, dict[str, int]]:
    """What the baselines (``COMPARED_WITH``) would do in this standing (for the iteration's record)."""
    return {name: get_policy(name).decide(_view(get_policy(name), standing), "auto").steps for name in COMPARED_WITH}


def _view(rule: Policy, standing: Standing) -> Standing:
    view = standing if rule.merges else standing.unmerged()
    return view if rule.reads_predictions else view.blind()
