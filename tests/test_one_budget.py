"""One budget for every task-model call of an iteration, and free evidence from recorded calls.

The predictions a proposer makes while proposing (its probes) are spent from the iteration's budget before the
staged evaluation gets the rest; a policy that reads no prediction gives the proposer nothing to spend; a revision
that only post-processes answers is scored exactly, from the calls the run already made, at no cost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedModel, ScriptedProposer, ToyTask, program

from metaharness.budget import Budget, Meter, SearchBudget, Spend
from metaharness.candidate import Evaluation, Prediction
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models.cache import ResponseCache
from metaharness.models.client import Client
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ChatRequest
from metaharness.models.replaying import NotRecorded, ReplayingClient
from metaharness.proposers.probe import PredictionBudgetSpent, Prober
from metaharness.search.loop import PREDICTING_SHARE, LoopSettings, Optimizer, Seed
from metaharness.search.protocol import Proposal, RunState
from metaharness.search.replay import Replay, Replayer
from metaharness.search.settings import SearchSettings
from metaharness.store import RunDirectory

CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": 4, "proposer": "scripted", "evals_per_iter": 2}


def diagnose(request: ChatRequest) -> str:
    return "dengue" if "fever" in request.messages[-1]["content"] else "psoriasis"


def harness(answer: str = "response.strip()", system: str = "Name the disease.", extra: str = "") -> str:
    """A one-call harness: ``system`` then the input; its answer is ``answer`` of the model's ``response``."""
    return (
        "class Harness:\n"
        "    def __init__(self, lm, train):\n"
        "        self.lm = lm\n"
        "    def predict(self, x):\n"
        f"        system = {system!r}{extra}\n"
        "        response = self.lm([{'role': 'system', 'content': system}, {'role': 'user', 'content': x}])\n"
        f"        return {answer}\n"
    )


TAGGED = "'[DIAGNOSIS]' + response.strip() + '[/DIAGNOSIS]'"


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Client, ScriptedModel, TaskEvaluator, Evaluation]:
    """A real client (cache and ledger) over a scripted model, and a base harness evaluated through it."""
    model = ScriptedModel(diagnose, spec="openai:toy-model")
    client = Client("openai:toy-model", model, cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    evaluator = TaskEvaluator(ToyTask(), client, workers=2)
    base = tmp_path / "base" / "harness.py"
    base.parent.mkdir()
    base.write_text(harness())
    return client, model, evaluator, evaluator.evaluate(base, "val", trace_path=tmp_path / "base.jsonl")


def test_a_replaying_client_answers_only_calls_the_run_paid_for(recorded) -> None:
    client, model, _, _ = recorded
    replaying = ReplayingClient.of(client)
    assert replaying is not None
    made = ChatRequest([{"role": "system", "content": "Name the disease."}, {"role": "user", "content": "x"}])
    client.complete(made)
    asked = len(model.requests)
    assert replaying.complete(made).text == "psoriasis" and len(model.requests) == asked
    with pytest.raises(NotRecorded):
        replaying.complete(ChatRequest([{"role": "user", "content": "never asked"}]))
    # Another run's cache entry is not this run's call: a fresh ledger has paid for nothing.
    other = ReplayingClient.of(Client("openai:toy-model", model, cache=client.cache, ledger=Ledger()))
    assert other is not None
    with pytest.raises(NotRecorded):
        other.complete(made)
    assert ReplayingClient.of(model) is None  # no response cache: nothing to replay


def test_a_post_processing_revision_replays_exactly_and_a_prompt_change_does_not(recorded, tmp_path) -> None:
    client, model, evaluator, base = recorded
    replaying = ReplayingClient.of(client)
    assert replaying is not None
    replayer = Replayer(TaskEvaluator(ToyTask(), replaying, workers=2), tmp_path / "replays")
    asked = len(model.requests)
    tagged = replayer(harness(TAGGED), base.example_ids)
    assert tagged.complete and tagged.evaluation is not None and tagged.trace is not None
    assert len(model.requests) == asked  # no new call
    # The replay's scores are what a real evaluation gives, and it was charged nothing.
    real_path = tmp_path / "tagged" / "harness.py"
    real_path.parent.mkdir()
    real_path.write_text(harness(TAGGED))
    real = evaluator.evaluate(real_path, "val", trace_path=tmp_path / "tagged.jsonl")
    assert tagged.evaluation.example_scores == real.example_scores and tagged.score == pytest.approx(2 / 3)
    assert tagged.evaluation.spend() == Spend() and tagged.outputs["val-0001"] == "[DIAGNOSIS]dengue[/DIAGNOSIS]"
    assert replayer(harness(TAGGED), base.example_ids) is tagged  # kept for the loop
    # A new system prompt makes calls the run never made: nothing replays.
    changed = replayer(harness(TAGGED, system="You are a doctor."), base.example_ids)
    assert changed.evaluation is None and changed.missed == tuple(base.example_ids)
    # A prompt that changes on one example only: the other two are exact evidence.
    partly = replayer(harness(TAGGED, extra=" + ('!' if 'fever' in x else '')"), base.example_ids)
    assert partly.missed == ("val-0001",) and partly.evaluation is not None
    assert partly.evaluation.example_ids == ["val-0000", "val-0002"] and not partly.complete
    assert len(model.requests) == asked  # the real evaluation above made no call either: all cached


def test_a_probe_is_refused_when_the_iteration_cannot_afford_it(tmp_path) -> None:
    """The prober charges what each probe cost to the iteration's meter and refuses one it cannot afford."""
    model = ScriptedModel(diagnose, spec="openai:toy-model")
    client = Client("openai:toy-model", model, cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    prober = Prober(ToyTask(), client, size=1, seed=0, workers=1, folder=tmp_path / "probe")
    prober.meter = Meter(Budget(evals=1))
    result = prober.run(harness())
    assert len(result.correct) == 1 and prober.meter.spent.evals == 1.0 and prober.meter.spent.tokens > 0
    assert prober.affords(harness()) and not prober.affords(harness(TAGGED))  # probed already: free
    with pytest.raises(PredictionBudgetSpent, match="would pass what this iteration's predictions may still spend"):
        prober.run(harness(TAGGED))


class ProbingProposer(ScriptedProposer):
    """The scripted proposer, charging ``cost`` to the iteration's predictions before it proposes."""

    def __init__(self, cost: Spend, extra: dict[int, list[Proposal]] | None = None) -> None:
        super().__init__(extra)
        self.cost = cost

    def propose(self, state: RunState) -> list[Proposal]:
        if state.predicting.affords(self.cost):
            state.predicting.charge(self.cost)
        return super().propose(state)


def _run(tmp_path: Path, proposer, evaluation: str, replay=None, iterations: int = 1) -> RunDirectory:
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    settings = SearchSettings(evaluation=evaluation, budget=SearchBudget(evals_per_iter=2))
    Optimizer(
        run,
        LoopSettings("toy", settings, iterations),
        proposer,
        FakeEvaluator(),
        [Seed("zero", program(0.2))],
        replay=replay,
    ).run()
    run.close()
    return run


def test_predictions_are_spent_from_the_iteration_budget_before_evaluation_gets_the_rest(tmp_path) -> None:
    proposer = ProbingProposer(Spend(2, 300, 0.0))
    run = _run(tmp_path, proposer, "planner")
    state = proposer.states[0]
    # 2 full evaluations of 4 examples: 8 example-evaluations, of which the predictions may take a quarter.
    assert state.predictions and state.predicting.allowance.evals == pytest.approx(8 * PREDICTING_SHARE)
    (phase,) = run.log_records("phase")
    assert phase["phase"] == "predict" and phase["iteration"] == 1 and phase["spend"]["evals"] == 2.0
    line = run.log_records("iteration")[-1]
    assert line["budget"]["evals"] == pytest.approx(6.0)  # what the evaluation got: 8 less the 2 predicted
    assert line["spend"]["predict"] == {"evals": 2.0, "tokens": 300.0, "usd": 0.0}
    assert set(line["spend"]) == {"predict", "check", "measure"}
    assert line["spend"]["measure"]["evals"] <= 6.0


def test_a_policy_that_reads_no_prediction_gives_the_proposer_nothing_to_spend(tmp_path) -> None:
    proposer = ProbingProposer(Spend(2, 300, 0.0))
    run = _run(tmp_path, proposer, "halving")
    state = proposer.states[0]
    assert not state.predictions and not state.predicting.affords(Spend(evals=1))
    assert run.log_records("phase")[0]["spend"]["evals"] == 0.0
    assert run.log_records("iteration")[-1]["budget"]["evals"] == pytest.approx(8.0)


def test_a_replayed_revision_is_scored_for_free_before_any_policy_decides(tmp_path) -> None:
    """The loop records what the replay measured as the new candidate's first stage, at no cost; the policy then
    has nothing left to pay for it."""
    asked: list[tuple[str, tuple[str, ...]]] = []

    def replay(source: str, ids) -> Replay:
        asked.append((source, tuple(ids)))
        if "post-processed" not in source:
            return Replay(None, {}, tuple(ids), None)
        trace = tmp_path / "replayed.jsonl"
        trace.write_text("".join(f'{{"id": "{i}"}}\n' for i in ids))
        evaluation = Evaluation(
            "val", {"primary": 0.6}, {"charged_examples": 0.0, "charged_tokens": 0.0}, len(ids), example_ids=list(ids)
        )
        evaluation.example_scores = [0.6] * len(ids)
        return Replay(evaluation, {i: "x" for i in ids}, (), trace)

    free = Proposal("c001", program(0.6, "# post-processed\n"), "snap", prediction=Prediction(score=0.6, repeat=1.0))
    proposer = ScriptedProposer({1: [free]})
    run = _run(tmp_path, proposer, "best-of-n", replay=replay)
    candidates = {c.id: c for c in run.candidates()}
    snapped = next(c for c in candidates.values() if "post-processed" in c.source)
    assert snapped.supported and snapped.score == pytest.approx(0.6)
    assert snapped.evaluation is not None and snapped.evaluation.spend() == Spend()
    assert snapped.evaluation.increments[0].spend == Spend() and snapped.evaluation.increments[0].iteration == 1
    line = run.log_records("iteration")[-1]
    assert line["replayed"] == {snapped.id: 4}
    assert snapped.id not in line["allotted"]  # the policy never paid for it
    assert all(sorted(ids) == ["1", "2", "3", "4"] for _, ids in asked)  # the scored examples of the seed
    assert len(asked) == 2 and proposer.states[0].replay is replay
