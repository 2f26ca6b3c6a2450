"""A program whose outputs do not depend on the model's answers is found before anything is spent and scored with
no model call; one that reads the answers, however it reads them, is not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fakes import ScriptedModel, ScriptedProposer, ToyTask
from test_one_budget import TAGGED, diagnose, harness

from metaharness.budget import SearchBudget, Spend
from metaharness.candidate import Candidate, Evaluation
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models.cache import ResponseCache
from metaharness.models.client import Client
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ChatRequest
from metaharness.models.stand_in import StandInClient, schema_value
from metaharness.proposers.simulation import RevisionSimulator
from metaharness.report import write_summary_markdown
from metaharness.search.loop import LoopSettings, Optimizer, Seed
from metaharness.search.model_free import ModelFreeCheck
from metaharness.search.protocol import Proposal
from metaharness.search.settings import SearchSettings
from metaharness.store import RunDirectory

ANSWERS = ["dengue", "fungal infection", "psoriasis"]
IDS = ["val-0000", "val-0001", "val-0002"]
# Calls the model, then answers by a rule of its own: the output cannot depend on what the model said.
IGNORES = harness(answer="'[DIAGNOSIS]' + ('dengue' if 'fever' in x else 'psoriasis') + '[/DIAGNOSIS]'")
# Reads the answer only when it comes in one form, the form its own few-shot turn shows.
FORMAT = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        self.lm = lm\n"
    "    def predict(self, x):\n"
    "        shots = [{'role': 'user', 'content': 'fever'}, {'role': 'assistant', 'content': 'Answer: dengue'}]\n"
    "        said = self.lm(shots + [{'role': 'user', 'content': x}])\n"
    "        label = said.split('Answer:', 1)[1].strip() if said.startswith('Answer:') else 'psoriasis'\n"
    "        return '[DIAGNOSIS]' + label + '[/DIAGNOSIS]'\n"
)
CONSTRAINED = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        self.lm = lm\n"
    "    def predict(self, x):\n"
    "        schema = {'type': 'object', 'properties': {'label': {'enum': ['dengue', 'psoriasis']}}}\n"
    "        return '[DIAGNOSIS]' + self.lm.json(x, schema)['label'] + '[/DIAGNOSIS]'\n"
)


def check(tmp_path: Path) -> ModelFreeCheck:
    return ModelFreeCheck(ToyTask(), lambda task, client: TaskEvaluator(task, client, workers=1), tmp_path / "checks")


def test_a_stand_in_varies_its_answer_with_the_salt_and_nothing_else() -> None:
    request = ChatRequest([{"role": "user", "content": "fever"}])
    answers = [StandInClient(ANSWERS, salt).complete(request) for salt in range(3)]
    assert len({a.text for a in answers}) == 3 and all(a.text in ANSWERS for a in answers)
    assert StandInClient(ANSWERS, 1).complete(request).text == answers[1].text  # no process state
    assert not answers[0].charged and answers[0].usage.input_tokens == 0
    shown = ChatRequest([{"role": "assistant", "content": "Answer: dengue"}, {"role": "user", "content": "x"}])
    assert {StandInClient([], salt).complete(shown).text for salt in range(2)} >= {"Answer: dengue"}


def test_a_stand_in_ends_its_answer_at_a_stop_string_as_a_server_does() -> None:
    """A harness that asks with ``stop`` gets the stand-in's answer cut where the model's would be: otherwise a
    program that echoes the answer's form (a few-shot turn ending ``<eoa>``) outputs one text in the check and
    another with the model, and a free candidate never matches its twin scored with the model."""
    turns = [{"role": "assistant", "content": "[D]dengue<eoa>"}, {"role": "user", "content": "x"}]
    cut = StandInClient(["[D]psoriasis<eoa> and more"], 0).complete(ChatRequest(turns, stop=["<eoa>", "\n\n"]))
    assert cut.text == "[D]dengue"
    texts = {
        StandInClient(["[D]psoriasis<eoa> and more"], s).complete(ChatRequest(turns, stop=["<eoa>"])).text
        for s in (0, 1)
    }
    assert texts == {"[D]dengue", "[D]psoriasis"}
    assert StandInClient(["[D]x<eoa>"], 0).complete(ChatRequest([{"role": "user", "content": "x"}])).text == "[D]x<eoa>"


def test_a_schema_value_validates_against_its_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "label": {"enum": ["a", "b"]},
            "n": {"type": "integer", "minimum": 3},
            "tags": {"type": "array"},
        },
        "required": ["label", "n", "tags"],
    }
    values = [schema_value(schema, "text", pick) for pick in range(2)]
    assert {v["label"] for v in values} == {"a", "b"}
    assert all(v["n"] >= 3 and v["tags"] == ["text"] for v in values)


# Reads the answer only for inputs that mention a fever (val-0001), else answers by a rule.
PARTLY = harness(answer="'[DIAGNOSIS]' + (response.strip() if 'fever' in x else 'psoriasis') + '[/DIAGNOSIS]'")
# Memoises the model's answer by input: the repeats see the first answer only.
MEMO = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        self.lm, self.memo = lm, {}\n"
    "    def predict(self, x):\n"
    "        if x not in self.memo:\n"
    "            self.memo[x] = self.lm(x)\n"
    "        return '[DIAGNOSIS]' + self.memo[x] + '[/DIAGNOSIS]'\n"
)
# Parses the answer as JSON: every stand-in answer raises the same error, which the model's might not.
PARSES = harness(answer="__import__('json').loads(response)['label']")


@pytest.mark.parametrize(
    ("source", "free"),
    [
        (IGNORES, IDS),
        (harness(answer=TAGGED), []),
        (FORMAT, []),
        (CONSTRAINED, []),
        (PARTLY, ["val-0000", "val-0002"]),
        (MEMO, []),
        (PARSES, []),
    ],
    ids=["ignores-the-answer", "reads-it", "reads-one-form", "json-enum", "partly", "memoises", "parses-json"],
)
def test_only_outputs_that_ignore_the_answers_are_free(tmp_path: Path, source: str, free: list[str]) -> None:
    found = check(tmp_path)(source, IDS)
    assert list(found.free) == free and found.model_free is (free == IDS)
    assert found.runs == 1 and found.seconds >= 0  # one sandbox run: every example three times
    if free:
        assert found.evaluation is not None and found.evaluation.model_free is (free == IDS)
        assert found.evaluation.example_ids == free and found.evaluation.spend() == Spend()
        assert found.trace is not None and len(found.trace.read_text().splitlines()) == len(free)
    if source == IGNORES:
        assert found.evaluation is not None and found.evaluation.primary == pytest.approx(2 / 3)


def test_a_revision_that_reads_the_model_on_some_examples_is_not_predicted_as_model_free(tmp_path: Path) -> None:
    """The offline proposer predicts a revision of a model-free base with no model call only when the revision is
    model-free on every one of the base's examples: a score on the free ones alone would stand for all of them, at
    a predicted cost of nothing, where the rest cost model calls (before, PARTLY was predicted 'model-free')."""
    simulator = RevisionSimulator.__new__(RevisionSimulator)
    state = SimpleNamespace(model_free=check(tmp_path), iteration=1, trace_path=lambda candidate: None)
    simulator.state = cast(Any, state)  # what _model_free reads of a RunState
    simulator.replayed = 0
    scored = Evaluation("val", {"primary": 1 / 3}, {}, example_ids=IDS, example_scores=[1.0, 0.0, 0.0], model_free=True)
    base = Candidate("c001", None, 0, IGNORES, evaluation=scored)
    assert simulator._model_free("read the model on fevers only", PARTLY, base, ["snap_to_labels"]) is None
    exact = simulator._model_free("the same rule", IGNORES, base, ["snap_to_labels"])
    assert exact is not None and exact.data["predicted_by"] == "model-free" and exact.cost == (0.0, 0.0, 0.0)
    assert exact.score == pytest.approx(2 / 3) and simulator.replayed == 1


def test_a_check_asked_again_is_the_first_one_paid_once_and_prefetched_checks_run_together(tmp_path: Path) -> None:
    evaluators: list[object] = []

    def evaluator_for(task: object, client: StandInClient) -> TaskEvaluator:
        evaluators.append(client)
        return TaskEvaluator(task, client, workers=1)  # type: ignore[arg-type]

    checks = ModelFreeCheck(ToyTask(), evaluator_for, tmp_path / "checks")
    first = checks(IGNORES, IDS)
    again = checks(IGNORES, IDS)
    assert len(evaluators) == 1 and first.runs == 1 and (again.runs, again.seconds) == (0, 0.0)
    assert again.evaluation == first.evaluation and again.trace == first.trace and again.model_free
    checks(IGNORES, IDS[:2])  # other examples: checked
    checks.learn(["an answer no stand-in gave"])
    checks(IGNORES, IDS)  # other answers to give: checked again
    assert len(evaluators) == 3
    checks.prefetch([(PARTLY, IDS), (MEMO, IDS), (IGNORES, IDS)])  # the last was checked with these answers
    assert len(evaluators) == 5
    partly, memo = checks(PARTLY, IDS), checks(MEMO, IDS)
    assert len(evaluators) == 5 and partly.runs == memo.runs == 1  # the call that asks first pays for it
    assert list(partly.free) == ["val-0000", "val-0002"] and not memo.free
    assert partly.trace is not None and len(partly.trace.read_text().splitlines()) == 2
    assert checks(PARTLY, IDS).runs == 0


def test_a_program_that_does_not_load_is_left_to_the_evaluation(tmp_path: Path) -> None:
    assert not check(tmp_path)("class Harness:\n    def __init__(self, lm, train):\n        1 / 0\n", IDS).model_free


def test_the_loop_scores_a_model_free_proposal_with_no_model_call_and_says_so(tmp_path: Path) -> None:
    """A model-free proposal gets its whole share before any policy decides, charged nothing, the task model never
    asked; the iteration's line names it and what the checks cost."""
    model = ScriptedModel(diagnose, spec="openai:toy-model")
    client = Client("openai:toy-model", model, cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    run = RunDirectory.open(tmp_path / "run", {"dataset": "toy", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="planner", budget=SearchBudget(evals_per_iter=2))
    proposer = ScriptedProposer({1: [Proposal("c001", IGNORES, "answer by a rule")]})
    optimizer = Optimizer(
        run,
        LoopSettings("toy", search, iterations=1, test=False),
        proposer,
        TaskEvaluator(ToyTask(), client, workers=1),
        [Seed("tagged", harness(answer=TAGGED))],
        model_free=check(tmp_path),
    )
    optimizer.run()
    run.close()
    calls_after_seed = len(model.requests)
    assert calls_after_seed == 3  # the seed's three examples; nothing for the proposal
    free = next(c for c in run.candidates() if c.summary == "answer by a rule")
    assert free.supported and free.evaluation is not None and free.evaluation.model_free
    assert free.evaluation.spend() == Spend() and free.score == pytest.approx(2 / 3)
    line = run.log_records("iteration")[-1]
    assert line["model_free"] == {free.id: 3} and free.id not in line["allotted"]
    # The scripted proposer's other proposal has no predict: the model-free check is its load check (it fails)
    assert line["checks"]["candidates"] == 2 and line["checks"]["model_free"] == 1 and line["checks"]["runs"] == 2
    assert next(c for c in run.candidates() if c.summary.startswith("improve")).failed
    assert line["identical"]["charged"] == 0
    seeds = run.log_records("iteration")[0]
    assert seeds["checks"]["model_free"] == 0 and seeds["model_free"] == {}


def test_the_loop_scores_free_the_examples_where_the_answer_cannot_matter_and_pays_for_the_rest(tmp_path: Path):
    model = ScriptedModel(diagnose, spec="openai:toy-model")
    client = Client("openai:toy-model", model, cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    run = RunDirectory.open(tmp_path / "run", {"dataset": "toy", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="all", budget=SearchBudget(evals_per_iter=2))
    proposer = ScriptedProposer({1: [Proposal("c001", PARTLY, "read the model on fevers only")]})
    Optimizer(
        run,
        LoopSettings("toy", search, iterations=1, test=False),
        proposer,
        TaskEvaluator(ToyTask(), client, workers=1),
        [Seed("rule", IGNORES)],
        model_free=check(tmp_path),
    ).run()
    run.close()
    partly = next(c for c in run.candidates() if c.summary == "read the model on fevers only")
    assert partly.supported and partly.evaluation is not None and not partly.evaluation.model_free
    first, *rest = partly.evaluation.increments
    assert first.examples == 2 and first.spend == Spend()  # val-0000 and val-0002: no model call
    assert sum(i.examples for i in rest) == 1 and sum(i.spend.evals for i in rest) == 1.0  # val-0001: paid
    assert len(model.requests) == 1 and "fever" in model.requests[0].messages[-1]["content"]
    assert run.log_records("iteration")[-1]["model_free"] == {partly.id: 2}
    text = write_summary_markdown(run).read_text(encoding="utf-8")
    assert "## Free evidence, and spend on outputs the run already had" in text
    assert "- **Predicting:** 0 task-model tokens in probes" in text and "saved 5 example-evaluations scored" in text
    assert "| 0 | 1 candidate, 3 examples | none |" in text and "| 1 | 1 candidate, 2 examples | none |" in text


def test_an_intermediate_of_a_chain_is_scored_free_before_a_policy_can_pay_for_it(tmp_path: Path) -> None:
    """A chain's intermediate step is committed unevaluated, but a policy may still pick it: when its outputs do not
    depend on the model, the free evidence scores it first, so no policy pays the model for it (before, the "all"
    policy paid the task model for its three examples)."""
    model = ScriptedModel(diagnose, spec="openai:toy-model")
    client = Client("openai:toy-model", model, cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    run = RunDirectory.open(tmp_path / "run", {"dataset": "toy", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="all", budget=SearchBudget(evals_per_iter=6))
    rule = "'[DIAGNOSIS]' + ('dengue' if 'fever' in x else 'psoriasis') + '[/DIAGNOSIS]'"
    step = Proposal(None, harness(answer=rule, system="Say the disease."), "answer by a rule")  # calls of its own
    final = Proposal("c001", PARTLY, "read the model on fevers only", intermediates=[step])
    Optimizer(
        run,
        LoopSettings("toy", search, iterations=1, test=False),
        ScriptedProposer({1: [final]}),
        TaskEvaluator(ToyTask(), client, workers=1),
        [Seed("tagged", harness(answer=TAGGED))],
        model_free=check(tmp_path),
    ).run()
    run.close()
    by_summary = {c.summary: c for c in run.candidates()}
    free = by_summary["answer by a rule"]
    assert free.supported and free.evaluation is not None and free.evaluation.model_free
    assert free.evaluation.spend() == Spend()
    assert len(model.requests) == 3  # the seed's three examples (the final proposal's one fever repeats one)
    line = run.log_records("iteration")[-1]
    assert line["model_free"] == {free.id: 3, by_summary["read the model on fevers only"].id: 2}
    assert free.id not in line["allotted"]


class CountingChecks(TaskEvaluator):
    """A `TaskEvaluator` that remembers which candidates it was asked to load with the real model."""

    checked: list[str]

    def check(self, harness: Path) -> str | None:
        self.checked.append(harness.parent.name)
        return super().check(harness)


def test_the_model_free_check_is_the_load_check_of_a_candidate_to_evaluate(tmp_path: Path) -> None:
    """A candidate to be evaluated is loaded by the model-free check, not also by a check of its own; one that does
    not load there is loaded with the real model, and recorded failed with its error when that fails too."""
    model = ScriptedModel(diagnose, spec="openai:toy-model")
    client = Client("openai:toy-model", model, cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    run = RunDirectory.open(tmp_path / "run", {"dataset": "toy", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="planner", budget=SearchBudget(evals_per_iter=2))
    broken = (
        "class Harness:\n    def __init__(self, lm, train):\n        1 / 0\n"
        "    def predict(self, x):\n        return x\n"
    )
    proposer = ScriptedProposer({1: [Proposal("c001", IGNORES, "answer by a rule"), Proposal("c001", broken, "no")]})
    evaluator = CountingChecks(ToyTask(), client, workers=1)
    evaluator.checked = []
    Optimizer(
        run,
        LoopSettings("toy", search, iterations=1, test=False),
        proposer,
        evaluator,
        [Seed("tagged", harness(answer=TAGGED))],
        model_free=check(tmp_path),
    ).run()
    run.close()
    by_summary = {c.summary: c for c in run.candidates()}
    assert by_summary["answer by a rule"].supported and by_summary["seed: tagged"].supported
    failed = by_summary["no"]
    assert failed.failed and failed.error is not None and "ZeroDivisionError" in failed.error
    improve = next(c for c in run.candidates() if c.summary.startswith("improve"))  # the scripted one: no predict
    assert improve.failed and improve.error is not None and "predict" in improve.error
    assert evaluator.checked == [improve.id, failed.id]  # the seed and "answer by a rule": loaded by the check only
