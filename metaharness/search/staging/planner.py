"""The ``planner`` policy: the TPS planner's allocation (`metaharness.search.staging.allocation.allocate`), which
maximises the expected true score of the candidate the run will return (`metaharness.frontier.best`: the highest
raw score among supported candidates).

The leader (the partly scored candidate the return rule would favour, when its posterior mean is above the
reference) is first taken to its next stage, so what the run would return is brought to support; then the solver
chooses, within the budget and keeping the reserve to complete what it leaves partial, which candidates go to
which stage, and every chosen candidate gets its next stage now (the rest of its plan is re-decided with the
evidence it brings: a rolling horizon). Losers stop early. When the solver wants nothing more, what is left of the
iteration's budget may go, a stage at a time, to the arm with the highest posterior mean that is worth completing
and whose completion fits (``fill``): the solver's objective counts only the candidate returned after this
iteration, not what a supported candidate is worth to the iterations after it, chiefly as a parent whose
post-processing children are scored free by replaying its calls. The fill prices that option by what such free
children were worth in this run so far (`Standing.child_lift`) and completes an arm only when its posterior mean
gain over the reference plus that worth is not below 0; otherwise the budget is left unspent. Under a per-run cap
that is tighter than the iteration's, the fill spends from the run's too.
"""

from __future__ import annotations

from metaharness.budget import Spend
from metaharness.search.staging.allocation import AllocationSolver, allocate
from metaharness.search.staging.arms import Allocation
from metaharness.search.staging.policy import Round, register
from metaharness.search.staging.standing import Standing


class Planner:
    """The TPS planner's staged evaluation (module docstring): the leader's next stage, else the solver's next
    stages, else the fill."""

    name = "planner"
    reads_predictions = asks_predictions = compared = True
    merges = True

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round:
        leader = standing.leader()
        if leader is not None:
            target = standing.next_stage(leader)
            if target is not None and standing.left.allows(standing.cost_to(leader, target)):
                return Round({leader: target}, "leader", standing.cost_to(leader, target))
        plan = allocate(standing.arms, standing.left, solver=solver)
        steps = {}
        for cid in plan.targets:
            stage = standing.next_stage(cid)
            if stage is not None:
                steps[cid] = stage
        if not steps:
            return _fill(standing, plan)
        predicted = Spend()
        for cid, target in steps.items():
            predicted = predicted + standing.cost_to(cid, target)
        return Round(steps, "solver", predicted, plan)


register(Planner())


def _fill(standing: Standing, plan: Allocation) -> Round:
    """The planner's use of what its solver leaves (module docstring): the next stage of the arm with the highest
    posterior mean (ties: the earlier) that is worth completing and whose completion fits what is left; none when
    none is. Worth completing: its posterior mean gain over the reference plus what a supported candidate's free
    children were worth in this run (`Standing.child_lift`) is not below 0, i.e. counting that option, it is at
    least as likely as not to beat the reference once completed. An arm whose outputs so far equal a supported
    candidate's (`Standing.twin`) is not completed: that option is the twin's already, and what it could add lies
    only in its unscored examples, which the solver weighs."""
    lift = standing.child_lift
    worth = (a for a in standing.arms if a.options and a.mean + lift >= 0 and standing.twin(a.id) is None)
    for arm in sorted(worth, key=lambda a: -a.mean):
        if standing.left.allows(standing.cost_to(arm.id, arm.share)):
            step = arm.options[0]
            return Round({arm.id: step.target}, "fill", step.cost, plan)
    return Round({}, "solver", Spend(), plan)
