"""The offline proposer end to end through the real evaluator (sandboxed harnesses), with a scripted task model.

The scripted model answers from keywords of the prompt, so operator revisions change behaviour in a known way;
the embedded model runs in the slow end-to-end test and in the optimize run reported in the README.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedModel, seed_candidate

from metaharness.budget import Budget, Meter
from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.candidates import ROOT as SEEDS
from metaharness.errors import InputError
from metaharness.proposers import PROPOSER_NAMES, get_proposer, proposer_name, renamed_note
from metaharness.proposers.offline import cyclic_collection_paused
from metaharness.proposers.probe import ChangePrior, HeldOutTask, Spread, estimate_change
from metaharness.search.protocol import Proposal, Proposer, RunState
from metaharness.tasks import get_task


def diagnose_by_keyword(request) -> str:
    """'common cold' when the question mentions sneezing, else a misspelt 'Dengu fever' (which label snapping
    repairs): operator revisions change what a harness answers in a known way."""
    question = request.messages[-1]["content"].split("Symptoms:")[-1].lower()
    return "common cold" if "sneez" in question else "Dengu fever"


def keyword_model() -> ScriptedModel:
    """A deterministic stand-in task model (``diagnose_by_keyword``)."""
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
    cost = {"input_tokens": 1000.0, "output_tokens": 50.0}
    seeds = [
        seed_candidate(f"c{i}", name, (SEEDS / "symptom2disease" / f"{name}.py").read_text(), 0.1 * (i + 1), cost)
        for i, name in enumerate(["zero_shot", "retrieval"])
    ]
    failed = Candidate(id="c9", parent="c0", source="class Harness: pass", iteration=0, status="failed", error="boom")
    return RunState(task="symptom2disease", iteration=iteration, candidates=[*seeds, failed], proposals=evals)


def test_held_out_probe_split_is_disjoint_from_the_harness_train(task) -> None:
    held = HeldOutTask(task, 10, seed=3)
    probe_ids = {ex.id for ex in held.load("probe")}
    train_ids = {ex.id for ex in held.load("train")}
    assert len(probe_ids) == 10 and not probe_ids & train_ids
    assert len(probe_ids | train_ids) == len(task.load("train"))


def prediction(proposal: Proposal) -> dict[str, Any]:
    """A proposal's prediction as the run stores it (the offline proposer predicts every proposal)."""
    assert proposal.prediction is not None
    return proposal.prediction.to_json()


def offline(task, **options) -> Proposer:
    """The offline proposer over ``task`` with the keyword model and ``options``."""
    return get_proposer("offline", task=task, task_model=keyword_model(), **options)


def _run_state(proposals: int, *, context_tokens: float = 300.0, iteration: int = 1) -> RunState:
    """Two evaluated seeds (zero-shot 0.1, retrieval 0.2) on 50 validation examples, with measured tokens."""
    state = _state(iteration, proposals)
    for cand in state.supported():
        assert cand.evaluation is not None
        cand.evaluation.examples = 50
        cand.evaluation.cost["context_tokens"] = context_tokens
    return state


def test_offline_proposer_makes_many_proposals_and_returns_the_first_in_generation_order(task, tmp_path) -> None:
    """``plans`` new candidates an iteration however few the loop takes; the loop gets the first
    ``state.proposals`` of them in the order they were made (no re-ranking), each with its full prediction."""
    model = keyword_model()
    proposer = get_proposer("offline", task=task, task_model=model, probe_size=6, plans=6, run_dir=tmp_path, seed=1)
    assert isinstance(proposer, Proposer) and proposer.name == "offline"
    state = _run_state(2)
    state.run_dir = tmp_path
    proposals = proposer.propose(state)
    record = json.loads((tmp_path / "proposer" / "planning" / "iteration-001.json").read_text())
    made = [n for n in record["made"] if n not in record["dead_ends"]]
    assert len(made) >= 6 and record["want"] == 6 and record["predicting"]["probes_not_afforded"] == 0
    assert [p.node for p in proposals] == record["proposed"] == made[:2]
    assert [prediction(p)["rank"] for p in proposals] == [0, 1]
    known = {c.source for c in state.candidates}
    for p in proposals:
        assert p.parent in {"c0", "c1"} and p.source not in known
        compile(p.source, "harness.py", "exec")
        pred = prediction(p)
        assert {"score", "std", "base", "raw_gain", "node", "chain", "flips", "probe", "cost"} <= set(pred)
        assert {"tokens_per_example", "usd_per_example", "repeat", "probe_std", "pair_variance"} <= set(pred)
        assert pred["selection"] == "generation" and pred["probe"]["examples"] == 6
        assert 0.0 <= pred["score"] <= 1.0 and pred["std"] > 0.03 and pred["usd_per_example"] == 0.0
        assert p.summary == (pred["chain"][-1] if p.intermediates else "; then ".join(pred["chain"]))
        assert [s.summary for s in p.intermediates] == pred["chain"][:-1]
    assert model.requests and (tmp_path / "proposer" / "probe").is_dir()

    # Taking 8, the loop gets 8 new ones; the graph kept the first iteration's predictions, so nothing is made
    # twice, and what was left over comes only after what this iteration made.
    later = _run_state(8, iteration=2)
    later.graph = state.graph
    more = proposer.propose(later)
    assert len(more) == 8 and not {p.node for p in more} & set(made)
    assert any(p.intermediates for p in more)  # chains of revisions, each step its own node


def test_predictions_say_what_a_candidate_costs_per_example_and_how_much_repeats_its_base(task) -> None:
    """A revision that only post-processes answers repeats every base call (repeat 1.0: free where the base was
    evaluated); one that changes the prompt repeats none. Tokens per example: the base's measured ones scaled by
    the probe."""
    proposer = offline(task, probe_size=4, plans=4, operators=["snap_to_labels", "answer_format", "retrieve_k2"])
    proposals = proposer.propose(_run_state(12))
    by_op = {prediction(p)["chain_ops"][-1]: prediction(p) for p in proposals if not p.intermediates}
    assert by_op["snap_to_labels"]["repeat"] == 1.0
    assert by_op["answer_format"]["repeat"] == 0.0 and by_op["retrieve_k2"]["repeat"] == 0.0
    # The scripted model counts 15 tokens a call whatever the prompt: the base's 1050 tokens over 50 examples.
    assert {p["tokens_per_example"] for p in by_op.values()} == {21.0}


def test_a_quiet_probe_does_not_claim_a_small_uncertainty() -> None:
    """A probe of 8 examples that saw no flip cannot resolve a change of 1 in 20: the std of the true change stays
    near 0.05 (above the 0.03 floor), shrinks with a larger probe and grows with what did flip; the per-example
    variance of paired differences says how noisy measuring it is."""
    prior = ChangePrior()
    quiet = estimate_change([0.0] * 8, prior)
    assert 0.045 < quiet.std < 0.06 and quiet.mean == 0.0
    assert quiet.pair_variance == pytest.approx(0.4 / 12)
    assert estimate_change([0.0] * 200, prior).std < 0.03 < quiet.std
    flipped = estimate_change([1.0, 1.0] + [0.0] * 6, prior)
    assert flipped.std > 2 * quiet.std and flipped.mean == pytest.approx(2 / 12)


def test_the_change_prior_and_the_spread_come_from_the_run() -> None:
    assert ChangePrior.fit([]) == ChangePrior()
    quiet = ChangePrior.fit([(0.0, 8)] * 20)
    assert quiet.rate < 0.02 and quiet.revisions == 20
    # Revisions that either change nothing or a lot: a quiet probe says more than among uniform ones.
    mixed = ChangePrior.fit([(0.0, 8)] * 16 + [(6.0, 8)] * 4)
    uniform = ChangePrior.fit([(1.0, 8)] * 10 + [(2.0, 8)] * 10)
    assert mixed.weight < uniform.weight
    assert Spread.fit([]).scale == 1.0
    # Misses of 2 std, no sampling noise: widen, towards 2 (two pseudo-pairs at 1 hold it back a little).
    assert Spread.fit([(0.2, 0.1, 0.0)] * 20).scale == pytest.approx(math.sqrt(82 / 22), abs=1e-3)
    # The same misses, all explained by measuring on few examples: no widening beyond the floor of one half.
    assert Spread.fit([(0.2, 0.1, 0.04)] * 20).scale == 0.5
    assert Spread.fit([(0.0, 0.1, 0.0)] * 20).scale == 0.5  # never narrower than half


def test_probes_are_spent_from_the_iteration_budget_and_the_rest_is_predicted_by_the_prior(task) -> None:
    """A probe costs its examples from what the iteration's predictions may spend (``RunState.predicting``); once
    that is spent, revisions are predicted by what their operator family gained in the run, and none is lost."""
    operators = ["answer_format", "answer_format_short", "retrieve_k2", "retrieve_k3", "retrieve_k4"]
    state = _run_state(5, context_tokens=2750.0)
    state.predicting = Meter(Budget(evals=16))  # both seeds' probes and two revisions', 4 examples each
    proposals = offline(task, probe_size=4, plans=5, operators=operators).propose(state)
    assert len(proposals) == 5 and state.predicting.spent.evals == 16
    how = [prediction(p)["predicted_by"] for p in proposals]
    assert how.count("probe") == 2 and how.count("prior") == 3
    assert prediction(proposals[0])["predicting"]["probes_not_afforded"] >= 3
    # A policy that reads no prediction: no probe at all, however large the probe size.
    model = keyword_model()
    free = _run_state(5)
    free.predictions, free.predicting = False, Meter(Budget(0, 0, 0))
    none = get_proposer("offline", task=task, task_model=model, probe_size=4, plans=5, operators=operators)
    assert len(none.propose(free)) == 5 and not model.requests


HASH_SEED_RUN = """
import hashlib, json, sys
sys.path.insert(0, {tests!r})
from test_proposers_offline import NoValTask, _run_state, keyword_model
from metaharness.proposers import get_proposer
from metaharness.tasks import get_task

task = NoValTask(get_task("symptom2disease", data_dir={data!r}))
proposer = get_proposer("offline", task=task, task_model=keyword_model(), probe_size=4, plans=6, seed={seed})
out = proposer.propose(_run_state(6))
print(json.dumps([
    [p.node, p.parent, p.summary, hashlib.sha256(p.source.encode()).hexdigest(), p.prediction.score,
     p.prediction.std, p.prediction.repeat, sorted(p.prediction.extra["flips"]["gained"])]
    for p in out
]))
"""


def _proposals_in_subprocess(data, seed: int, hash_seed: str) -> list:
    script = HASH_SEED_RUN.format(tests=str(Path(__file__).parent), data=str(data), seed=seed)
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_proposals_do_not_depend_on_the_hash_seed_and_a_seed_is_a_replicate(shared_data_dir) -> None:
    """The same proposer iteration in two processes with different PYTHONHASHSEED values proposes the same
    candidates with the same predictions; another ``seed`` probes other examples and proposes in another order."""
    first = _proposals_in_subprocess(shared_data_dir, 0, "1")
    assert len(first) == 6
    assert _proposals_in_subprocess(shared_data_dir, 0, "2") == first
    other = _proposals_in_subprocess(shared_data_dir, 1, "1")
    assert [p[3] for p in other] != [p[3] for p in first]


def test_the_frontier_moves_down_the_ranking_once_the_best_candidates_revisions_are_all_known(task) -> None:
    """When every revision of the best candidate is a known candidate (its combinations with the other seed
    too), the proposer revises the next one instead of returning nothing."""
    from metaharness.proposers.operators import COMBINATIONS, answer_profile, applicable

    proposer = get_proposer("offline", task=task, task_model=keyword_model(), probe_size=4, plans=3, frontier=1)
    state = _state()
    other, best = state.candidates[:2]  # retrieval, the better seed
    profile = answer_profile(task.load("train"))
    ops = applicable(best.source, profile) + [c.partner(other.id, other.source) for c in COMBINATIONS]
    tried = [
        Candidate(id=f"r{i}", parent=best.id, source=op.apply(best.source).source, iteration=1, status="failed")
        for i, op in enumerate(ops)
    ]
    state.candidates.extend(tried)
    proposals = proposer.propose(state)
    assert proposals and {p.parent for p in proposals} == {"c0"}


def starved_proposer(task, **options: object) -> Proposer:
    """The offline proposer restricted to an operator that revises no symptom2disease harness (a molecule
    operator): it can make nothing new, so it proposes what earlier iterations predicted."""
    return offline(task, probe_size=4, plans=2, operators=["canonical_smiles"], **options)


def test_a_proposer_that_can_make_nothing_new_proposes_nothing_from_an_empty_graph(task) -> None:
    assert starved_proposer(task).propose(_state()) == []


def test_snapping_is_predicted_to_help_when_the_model_misspells(task) -> None:
    proposer = get_proposer(
        "offline-greedy",
        task=task,
        task_model=keyword_model(),
        probe_size=12,
        plans=2,
        operators=["snap_to_labels", "answer_format"],
    )
    proposals = proposer.propose(_state(evals=4))
    assert proposer.name == "offline"  # an old name of the offline proposer (metaharness.proposers.RENAMED)
    (snapped,) = [p for p in proposals if prediction(p)["chain_ops"] == ["snap_to_labels"] and p.parent == "c0"]
    # "Dengu fever" snaps to "dengue": seed 0's probe sample holds a dengue case, which flips to correct.
    assert prediction(snapped)["flips"]["gained"] and not prediction(snapped)["flips"]["lost"]
    assert prediction(snapped)["score"] > 0.1


def test_names_and_errors(task) -> None:
    assert {"offline", "coding", "tps", "tps-greedy"} <= set(PROPOSER_NAMES)
    for old, now in {"base": "coding", "offline-greedy": "offline", "offline-best-of-n": "offline"}.items():
        assert old not in PROPOSER_NAMES and proposer_name(old) == now
        assert f"use --proposer {now}" in (renamed_note(old) or "")
    assert renamed_note("offline") is None
    with pytest.raises(InputError, match="Unknown proposer"):
        get_proposer("oracle", task=task, task_model=keyword_model())
    with pytest.raises(InputError, match="Unknown proposer option 'unknown_key'"):  # the options are typed
        get_proposer("offline", task=task, task_model=keyword_model(), unknown_key=1)
    empty = RunState(task="symptom2disease", iteration=1, candidates=[], proposals=3)
    assert get_proposer("offline", task=task, task_model=keyword_model()).propose(empty) == []


def test_calibration_learns_how_far_predictions_held() -> None:
    from metaharness.proposers.program_search import calibrate

    def cand(id, score, pred=None):
        prediction = Prediction(score=pred, base="s") if pred is not None else None
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


def test_a_post_processing_revision_is_predicted_exactly_from_recorded_calls(shared_data_dir, task, tmp_path) -> None:
    """With the run's replay, a snapping revision of an evaluated seed is scored on the seed's examples through the
    calls the seed made (no new call): its prediction is what evaluating it gives. A prompt change cannot be
    replayed: its prior is the seed's score (no family measured yet)."""
    from metaharness.evaluation.task_evaluator import TaskEvaluator
    from metaharness.models.cache import ResponseCache
    from metaharness.models.client import Client
    from metaharness.models.ledger import Ledger
    from metaharness.models.replaying import ReplayingClient
    from metaharness.search.replay import Replayer

    real = get_task("symptom2disease", data_dir=shared_data_dir)
    model = keyword_model()
    client = Client("openai:keywords", model, cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    evaluator = TaskEvaluator(real, client, val_limit=6, workers=2)
    seed = tmp_path / "work" / "harness.py"
    seed.parent.mkdir()
    seed.write_text((SEEDS / "symptom2disease" / "zero_shot.py").read_text())
    scored = evaluator.evaluate(seed, "val", trace_path=tmp_path / "c0.val.jsonl")
    base = Candidate(
        id="c0", parent=None, iteration=0, source=seed.read_text(), evaluation=scored, trace="c0.val.jsonl"
    )
    replaying = ReplayingClient.of(client)
    assert replaying is not None
    replayer = Replayer(TaskEvaluator(real, replaying, workers=2), tmp_path / "replays")
    state = RunState(task="symptom2disease", iteration=1, candidates=[base], proposals=2, run_dir=tmp_path)
    state.replay = replayer
    asked = len(model.requests)
    proposer = offline(task, plans=2, operators=["snap_to_labels", "answer_format"])
    proposals = proposer.propose(state)
    assert len(model.requests) == asked  # predicting made no call
    by_op = {prediction(p)["chain_ops"][-1]: p for p in proposals}
    snapped = prediction(by_op["snap_to_labels"])
    assert snapped["predicted_by"] == "replay" and snapped["repeat"] == 1.0 and snapped["replay"]["missed"] == 0
    path = tmp_path / "snapped" / "harness.py"
    path.parent.mkdir()
    path.write_text(by_op["snap_to_labels"].source)
    actual = evaluator.evaluate(path, "val", trace_path=tmp_path / "snapped.jsonl", examples=scored.example_ids)
    assert snapped["score"] == pytest.approx(actual.primary, abs=1e-4) and snapped["std"] == 0.0
    assert actual.spend().evals == 0  # every call was the seed's
    changed = prediction(by_op["answer_format"])
    assert changed["predicted_by"] == "prior" and changed["repeat"] == 0.0
    assert changed["score"] == pytest.approx(scored.primary, abs=1e-4)


def test_family_gains_are_measured_paired_and_shrunk_towards_no_gain() -> None:
    from metaharness.proposers.simulation import DEFAULT_GAIN_SD, FAMILY_WEIGHT, FamilyGains

    def scored(cid: str, scores: list[float], ops: list[str] | None = None) -> Candidate:
        ids = [f"v{i}" for i in range(len(scores))]
        evaluation = Evaluation("val", {"primary": sum(scores) / len(scores)}, example_ids=ids, example_scores=scores)
        evaluation.examples = len(scores)
        prediction = Prediction(base="s", extra={"chain_ops": ops}) if ops else None
        return Candidate(id=cid, parent="s", source="", iteration=1, evaluation=evaluation, prediction=prediction)

    base = scored("s", [0.0, 0.0, 1.0, 1.0])
    assert FamilyGains.fit([base]).prior("snap_to_labels") == (0.0, DEFAULT_GAIN_SD)
    snapped = [scored(f"a{i}", [1.0, 0.0, 1.0, 1.0], ["snap_to_labels"]) for i in range(3)]  # +0.25 each, paired
    worse = scored("b", [0.0, 0.0, 0.0, 1.0], ["answer_format"])  # -0.25
    gains = FamilyGains.fit([base, *snapped, worse])
    mean, sd = gains.prior("snap_to_labels")
    assert mean == pytest.approx(0.75 / (3 + FAMILY_WEIGHT)) and sd == pytest.approx(0.25)
    assert gains.prior("answer_format")[0] < 0 and gains.prior("retrieve_k2")[0] == 0.0 and gains.revisions == 4


@pytest.mark.slow
def test_twelve_iterations_never_go_without_a_proposal_worth_evaluating_while_blocks_remain(
    shared_data_dir, tmp_path
) -> None:
    """The real loop, evaluator and free replay over 3 validation examples, one evaluation an iteration, a small
    block library and chains of one revision, so the local edits around the best run out (on 3 examples most
    post-processing revisions replay exactly, no better than the best): every iteration still offers a proposal
    worth evaluating (not known exactly to score no better than the best), from lower ranked candidates, longer
    chains or combinations, unless the proposer found nothing left to try at all."""
    from metaharness.evaluation.task_evaluator import TaskEvaluator
    from metaharness.models.cache import ResponseCache
    from metaharness.models.client import Client
    from metaharness.models.ledger import Ledger
    from metaharness.models.replaying import ReplayingClient
    from metaharness.search.loop import LoopSettings, Optimizer, Seed
    from metaharness.search.replay import Replayer
    from metaharness.search.settings import SearchBudget, SearchSettings
    from metaharness.store import RunDirectory

    real = get_task("symptom2disease", data_dir=shared_data_dir)
    client = Client("openai:keywords", keyword_model(), cache=ResponseCache(tmp_path / "cache.sqlite"), ledger=Ledger())
    evaluator = TaskEvaluator(real, client, val_limit=3, workers=2)
    replaying = ReplayingClient.of(client)
    assert replaying is not None
    replay = Replayer(TaskEvaluator(real, replaying, workers=2), tmp_path / "replays")
    blocks = ["snap_to_labels", "neighbour_vote", "model_free_vote", "vote_k9", "vote_k3", "combine_fallback"]
    blocks.append("combine_vote")
    offline_proposer = get_proposer(
        "offline", task=NoValTask(real), task_model=keyword_model(), plans=2, depth=1, operators=blocks
    )
    run = RunDirectory.open(tmp_path / "run", {"dataset": "symptom2disease", "task_model": "scripted", "val_limit": 3})
    search = SearchSettings(evaluation="best-of-n", budget=SearchBudget(evals_per_iter=1))
    seeds = [Seed(name, (SEEDS / "symptom2disease" / f"{name}.py").read_text()) for name in ("zero_shot", "retrieval")]
    settings = LoopSettings("symptom2disease", search, 12, test=False, limit=3)
    outcome = Optimizer(run, settings, offline_proposer, evaluator, seeds, replay=replay).run()
    candidates = run.candidates()
    run.close()
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "run" / "proposer" / "planning").iterdir())]
    assert outcome.iterations_done == 12 and len(records) == 12
    offered = [(len(set(r["hopeful"]) & set(r["proposed"])), r["stopped"]) for r in records]
    assert all(hopeful or stopped == "exhausted" for hopeful, stopped in offered), str(offered)
    chains = [c.prediction.extra.get("chain_ops") for c in candidates if c.prediction]
    # two-parent revisions were proposed
    assert any(isinstance(ops, list) and any(str(op).startswith("combine_") for op in ops) for ops in chains)


def test_proposing_pauses_the_cyclic_collector_and_restores_it() -> None:
    assert gc.isenabled()
    with cyclic_collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), cyclic_collection_paused():
        raise RuntimeError("a proposer that fails")
    assert gc.isenabled()
    gc.disable()
    try:
        with cyclic_collection_paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
