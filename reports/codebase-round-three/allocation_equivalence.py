"""Print allocate()'s results on 300 seeded random problems (both solvers, with and without node limits)."""
import json, random
from metaharness.budget import Budget, Spend
from metaharness.planner.allocation import Arm, allocate, stage_options
out = []
for seed in range(300):
    rng = random.Random(seed)
    arms = []
    for i in range(rng.randint(1, 7)):
        examples = rng.choice([0, 0, 2, 5, 10])
        share = 20
        sd = rng.uniform(0.02, 0.2)
        var = sd**2 if not examples else 1 / (1 / sd**2 + examples / 0.2)
        arms.append(Arm(f"c{i}", rng.uniform(-0.2, 0.2), var, 0.2, examples, share,
                        stage_options(examples, share, Spend(1, rng.choice([0, 100]), 0)), 0.0,
                        tuple(rng.choice([-1.0, 0.0, 1.0]) for _ in range(examples)), rng.random() < 0.5))
    budget = Budget(evals=rng.choice([5, 10, 20, 40, 80]), tokens=rng.choice([float("inf"), 2000.0]))
    for solver, limit in (("auto", None), ("auto", 50), ("exact", None)):
        r = allocate(arms, budget, solver=solver, node_limit=limit)
        out.append([seed, solver, limit, r.targets, round(r.value, 12), r.status, r.nodes, round(r.net, 12), round(r.bound, 12) if r.bound == r.bound else None, r.truncated])
print(json.dumps(out))
