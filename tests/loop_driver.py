"""A whole run in its own process, for the kill tests: the real loop, store and spend journal (the wiring of
``metaharness.runner.ledger.run_ledger``), with the scripted proposer and evaluator of tests/fakes.py making
priced model calls through real clients on the run's ledger.

    python tests/loop_driver.py RUN_DIR [MAX_COST]

Every model call costs $0.001 (10 input tokens at $100 per million, 5 output tokens free). The evaluator makes one
task-model call per example (4 per evaluation); the proposer makes a planning call and two probe calls before it
proposes; in iteration 1 it chooses a chain (an intermediate, committed implemented, then its child) and leaves a
predicted program unchosen in the run's program graph. Each answered call adds a line to ``calls.log`` beside the
run directory, written by the model itself (before the ledger counts it), so a test can tell what was really spent
from what the run journaled. A crash point (``METAHARNESS_CRASH_AT``) SIGKILLs this process itself. The outcome is
printed as one JSON line.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from fakes import FakeEvaluator, ScriptedModel, ScriptedProposer, program

from metaharness.budget import Budget, SearchBudget
from metaharness.candidate import Evaluation, Prediction
from metaharness.models.client import Client
from metaharness.models.ledger import Ledger
from metaharness.models.prices import Price, PriceTable
from metaharness.models.protocol import ChatRequest, ChatResult, Role
from metaharness.planner import program as programs
from metaharness.report import write_summary_markdown
from metaharness.runner.ledger import run_ledger
from metaharness.search.loop import LoopSettings, Optimizer, Seed
from metaharness.search.protocol import Proposal, RunState
from metaharness.search.settings import SearchSettings
from metaharness.store import RunDirectory

CONFIG = {"dataset": "toy", "task_model": "openai:fake-task", "val_limit": 4, "proposer": "scripted"}
TASK, PROPOSER = "openai:fake-task", "openai:fake-proposer"
PRICES = PriceTable({TASK: Price(100.0, 0.0), PROPOSER: Price(100.0, 0.0)}, use_env=False)
CALL_USD = 0.001
ITERATIONS = 2
EVALS_PER_ITER = 2
# The loop's settings: every proposal evaluated in full, in order.
BEST_OF_N = SearchSettings(evaluation="best-of-n", budget=SearchBudget(evals_per_iter=EVALS_PER_ITER))


class CountedModel(ScriptedModel):
    """A scripted backend that appends its role to ``log`` for every answered call."""

    def __init__(self, log: Path) -> None:
        super().__init__("ok")
        self.log = log

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        result = super().complete(request, role=role)
        with open(self.log, "a") as handle:
            handle.write(f"{role}\n")
        return result


def ask(client: Client, role: Role, text: str) -> None:
    client.complete(ChatRequest([{"role": "user", "content": text}]), role=role)


class PricedEvaluator(FakeEvaluator):
    """FakeEvaluator whose every example calls the task model."""

    def __init__(self, task_model: Client) -> None:
        super().__init__()
        self.task_model = task_model

    def evaluate(
        self, harness: Path, split: str, *, trace_path: Path, progress: Any = None, examples: Any = None
    ) -> Evaluation:
        def example_done(done: int, total: int) -> None:
            ask(self.task_model, "task", f"{split} {harness.parent.name} example {done}")
            if progress:
                progress(done, total)

        return super().evaluate(harness, split, trace_path=trace_path, progress=example_done, examples=examples)


class PricedProposer(ScriptedProposer):
    """ScriptedProposer that plans with the proposer model and probes with the task model before proposing."""

    def __init__(self, model: Client, task_model: Client) -> None:
        super().__init__()
        self.model, self.task_model = model, task_model

    def propose(self, state: RunState) -> list[Proposal]:
        ask(self.model, "proposer", f"plan iteration {state.iteration}")
        ask(self.task_model, "task", "probe 1")
        ask(self.task_model, "task", "probe 2")
        proposals = super().propose(state)
        if state.iteration != 1:
            return proposals
        (better,) = proposals
        assert better.parent is not None
        graph = state.graph
        assert graph is not None
        for node, parent, score in [("step", better.parent, 0.33), ("goal", "step", 0.4), ("later", "c001", 0.25)]:
            if node not in graph.nx:  # a rerun after a kill between the graph's save and the plan's sees them
                programs.add_predicted(graph, node, parent, score, summary=node, data={"iteration": 1})
        step = Proposal(None, program(0.33), "intermediate step", prediction=Prediction(score=0.33), node="step")
        better.node, better.intermediates = "goal", [step]
        return [better]


def main(argv: list[str]) -> None:
    run_dir = Path(argv[0])
    max_cost = float(argv[1]) if len(argv) > 1 else None
    calls = run_dir.parent / "calls.log"
    run = RunDirectory.open(run_dir, CONFIG)
    try:
        costs = run_ledger(run, Budget(usd=math.inf if max_cost is None else max_cost), prices=PRICES)
        ledger: Ledger = costs.ledger
        task_model = Client(TASK, CountedModel(calls), cache=None, ledger=ledger)
        proposer_model = Client(PROPOSER, CountedModel(calls), cache=None, ledger=ledger)
        evaluator = PricedEvaluator(task_model)
        evaluator.test_available = True
        optimizer = Optimizer(
            run,
            LoopSettings("toy", BEST_OF_N, ITERATIONS),
            PricedProposer(proposer_model, task_model),
            evaluator,
            [Seed("zero", program(0.2)), Seed("few", program(0.3))],
            spending=costs,
            write_summary=lambda: write_summary_markdown(run),
        )
        outcome = optimizer.run()
    finally:
        run.close()
    totals = ledger.totals()
    print(
        json.dumps(
            {
                "best": outcome.best.id if outcome.best else None,
                "iterations": outcome.iterations_done,
                "stopped": outcome.stopped,
                "calls": totals["calls"],
                "usd": totals["dollars"],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
