"""The offline proposer end to end through the real evaluator (sandboxed harnesses), with a scripted task model.

The scripted model answers from keywords of the prompt, so operator revisions change behaviour in a known way;
the embedded model runs in the slow end-to-end test and in the optimize run reported in the README.
"""

from __future__ import annotations

import pytest
from fakes import ScriptedModel

from metaharness.candidate import Candidate, Evaluation
from metaharness.candidates import ROOT as SEEDS
from metaharness.errors import InputError
from metaharness.proposal import Proposer, RunState
from metaharness.proposers import PROPOSER_NAMES, get_proposer
from metaharness.proposers.probe import HeldOutTask
from metaharness.tasks import get_task


def diagnose_by_keyword(request) -> str:
    """'common cold' when the question mentions sneezing, else a misspelt 'Dengu fever' (which label snapping
    repairs): operator revisions change what a harness answers in a known way."""
    question = request.messages[-1]["content"].split("Symptoms:")[-1].lower()
    return "common cold" if "sneez" in question else "Dengu fever"


def keyword_model() -> ScriptedModel:
    """A deterministic stand-in task model (:func:`diagnose_by_keyword`)."""
    return ScriptedModel(diagnose_by_keyword, spec="scripted:keywords")


class NoValTask:
    """The real task, except that loading the validation split fails the test."""

    def __init__(self, task) -> None:
        self._task = task
        self.name = task.name
        self.description = task.description

    def load(self, split):
        assert split != "val", "a proposer must never read the validation split"
        return self._task.load(split)

    def score(self, prediction, example):
        return self._task.score(prediction, example)

    def metric_names(self):
        return self._task.metric_names()


@pytest.fixture
def task(shared_data_dir):
    return NoValTask(get_task("symptom2disease", data_dir=shared_data_dir))


def _state(iteration: int = 1, evals: int = 2) -> RunState:
    seeds = []
    for i, name in enumerate(["zero_shot", "retrieval"]):
        source = (SEEDS / "symptom2disease" / f"{name}.py").read_text()
        seeds.append(
            Candidate(
                id=f"c{i}",
                parent=None,
                source=source,
                iteration=0,
                summary=f"seed: {name}",
                evaluation=Evaluation(
                    "val", {"primary": 0.1 * (i + 1)}, {"input_tokens": 1000.0, "output_tokens": 50.0}
                ),
            )
        )
    failed = Candidate(id="c9", parent="c0", source="class Harness: pass", iteration=0, status="failed", error="boom")
    return RunState(task="symptom2disease", iteration=iteration, candidates=[*seeds, failed], proposals=evals)


def test_held_out_probe_split_is_disjoint_from_the_harness_train(task) -> None:
    held = HeldOutTask(task, 10, seed=3)
    probe_ids = {ex.id for ex in held.load("probe")}
    train_ids = {ex.id for ex in held.load("train")}
    assert len(probe_ids) == 10 and not probe_ids & train_ids
    assert len(probe_ids | train_ids) == len(task.load("train"))


def test_offline_proposer_plans_probes_and_chooses(task, tmp_path) -> None:
    model = keyword_model()
    proposer = get_proposer("offline", task=task, task_model=model, probe_size=6, plans=4, run_dir=tmp_path, seed=1)
    assert isinstance(proposer, Proposer) and proposer.name == "offline"
    state = _state()
    proposals = proposer.propose(state)
    assert 1 <= len(proposals) <= state.proposals
    known = {c.source for c in state.candidates}
    for p in proposals:
        assert p.parent in {"c0", "c1"}
        assert p.source not in known
        compile(p.source, "harness.py", "exec")
        pred = p.prediction
        assert {"score", "std", "label", "chain", "flips", "probe", "cost", "selection"} <= set(pred)
        assert pred["selection"] in ("exact", "ilp") and pred["probe"]["examples"] == 6
        assert 0.0 <= pred["score"] <= 1.0 and pred["std"] > 0
        assert p.summary == (pred["chain"][-1] if p.intermediates else "; then ".join(pred["chain"]))
        assert [s.summary for s in p.intermediates] == pred["chain"][:-1]
    assert model.requests and (tmp_path / "proposer" / "probe").is_dir()
    # Probes are memoised by source: asking again costs no new sandbox runs for what was already probed.
    runs = proposer.prober.runs
    proposer.propose(_state())
    assert proposer.prober.runs == runs
    # With the run's graph, which keeps the first round's predictions, the same call explores further instead.
    proposer.propose(state)
    assert proposer.prober.runs > runs


def test_the_frontier_moves_down_the_ranking_once_the_best_candidates_revisions_are_all_known(task) -> None:
    """When every revision of the best candidate is a known candidate, the proposer revises the next one instead
    of returning nothing."""
    from metaharness.proposers.operators import answer_profile, applicable

    proposer = get_proposer("offline", task=task, task_model=keyword_model(), probe_size=4, plans=3, frontier=1)
    state = _state()
    best = state.candidates[1]  # retrieval, the better seed
    profile = answer_profile(task.load("train"))
    tried = [
        Candidate(id=f"r{i}", parent=best.id, source=op.apply(best.source).source, iteration=1, status="failed")
        for i, op in enumerate(applicable(best.source, profile))
    ]
    state.candidates.extend(tried)
    proposals = proposer.propose(state)
    assert proposals and {p.parent for p in proposals} == {"c0"}


def test_a_probe_budget_too_small_for_any_revision_still_gives_a_proposal(task) -> None:
    proposer = get_proposer(
        "offline",
        task=task,
        task_model=keyword_model(),
        probe_size=4,
        plans=2,
        probe_tokens=1,
        operators=["more_retrieved"],
    )
    proposals = proposer.propose(_state())
    assert len(proposals) == 1 and "K 8 -> 16" in proposals[0].summary
    assert proposals[0].prediction["probe_tokens"]["spent"] > 1


def test_snapping_is_predicted_to_help_when_the_model_misspells(task) -> None:
    proposer = get_proposer(
        "offline-greedy",
        task=task,
        task_model=keyword_model(),
        probe_size=12,
        plans=2,
        operators=["snap_to_labels", "answer_format"],
    )
    proposals = proposer.propose(_state(evals=1))
    assert proposer.name == "offline-greedy" and len(proposals) == 1
    snapped = proposals[0]
    # "Dengu fever" snaps to "dengue": seed 0's probe sample holds a dengue case, which flips to correct.
    assert snapped.prediction["chain_ops"][0] == "snap_to_labels"
    assert snapped.prediction["flips"]["gained"] and not snapped.prediction["flips"]["lost"]
    assert snapped.prediction["score"] > 0.2 and snapped.prediction["selection"] == "greedy"


def test_names_and_errors(task) -> None:
    assert {"offline", "offline-greedy", "offline-random", "offline-best-of-n"} <= set(PROPOSER_NAMES)
    with pytest.raises(InputError, match="Unknown proposer"):
        get_proposer("oracle", task=task, task_model=keyword_model())
    assert (
        get_proposer("offline", task=task, task_model=keyword_model(), unknown_key=1).propose(
            RunState(task="symptom2disease", iteration=1, candidates=[], proposals=3)
        )
        == []
    )


def test_calibration_learns_how_far_predictions_held() -> None:
    from metaharness.proposers.program_search import calibrate

    def cand(id, score, pred=None):
        prediction = {"score": pred, "base": "s"} if pred is not None else None
        return Candidate(
            id=id,
            parent="s",
            source="",
            iteration=1,
            evaluation=Evaluation("val", {"primary": score}),
            prediction=prediction,
        )

    fresh = RunState(task="t", iteration=1, candidates=[cand("s", 0.3)], proposals=3)
    assert calibrate(fresh).slope == 1.0 and calibrate(fresh).pairs == 0
    # Predicted gains of +0.2 that came out at +0.05: trust the probe much less, and widen the uncertainty.
    burnt = RunState(
        task="t",
        iteration=3,
        candidates=[cand("s", 0.3), cand("a", 0.35, 0.5), cand("b", 0.3, 0.5), cand("c", 0.40, 0.5)],
        proposals=3,
    )
    cal = calibrate(burnt)
    assert cal.pairs == 3 and 0.2 < cal.slope < 0.6 and cal.residual > 0
