"""The replay of recorded runs (benchmarks/replay_study.py) on small run directories written through the real store.

A recorded run here is what ``metaharness optimize --evaluation all --holdout 0`` leaves: every candidate committed
and scored on every validation example, its trace holding each example's output and task-model calls, and each
iteration's prediction spend in a ``"phase"`` line. Outcomes are fixed per (program, example); a *post-processing*
revision asks its parent's prompts (its calls repeat its parent's), a *copy* behaves as its parent on every example.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest
from fakes import ToyTask
from studies import load_study
from test_one_budget import TAGGED, harness

from metaharness.budget import Spend
from metaharness.candidate import EVALUATED, IMPLEMENTED, Candidate, Evaluation, Increment, Prediction
from metaharness.errors import InputError
from metaharness.search.staging import decide
from metaharness.store import RunDirectory
from metaharness.store.archive import archive, pack, unpack
from metaharness.store.files import append_jsonl

EXAMPLES = [f"e{i:02d}" for i in range(15)]
CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": len(EXAMPLES), "proposer": "scripted"}


def _solved(salt: str, rate: float, example: str) -> float:
    digest = hashlib.sha256(f"{salt}/{example}".encode()).digest()
    return float(digest[0] / 256 < rate)


@dataclasses.dataclass(frozen=True)
class Program:
    prompt: str  # what its calls ask (a post-processing revision keeps its parent's)
    salt: str  # its behaviour (a copy keeps its parent's)
    rate: float
    max_tokens: int | None = None  # its calls' answer-length limit
    answered: int = 10  # the tokens each answer took


def _record(
    run: RunDirectory,
    cid: str,
    parent: str | None,
    iteration: int,
    program: Program,
    predicted: float | None,
    family: str | None = None,
):
    extra = {"family": family} if family else {}
    prediction = None if predicted is None else Prediction(score=predicted, std=0.1, base=parent, extra=extra)
    candidate = Candidate(cid, parent, iteration, f"{program}", IMPLEMENTED, summary=cid, prediction=prediction)
    run.commit(candidate)
    scores = [_solved(program.salt, program.rate, e) for e in EXAMPLES]
    records = [
        {
            "id": e,
            "input": e,
            "target": "",
            "prediction": f"{program.salt}:{e}:{s}",
            "scores": {"primary": s},
            "calls": [
                {
                    "messages": [{"role": "user", "content": f"{program.prompt} {e}"}],
                    "options": {"temperature": 0, **({"max_tokens": program.max_tokens} if program.max_tokens else {})},
                    "input_tokens": 90,
                    "output_tokens": program.answered,
                    "usd": 0.0,
                }
            ],
        }  # fmt: skip
        for e, s in zip(EXAMPLES, scores, strict=True)
    ]
    trace = run.trace_path(cid, "val")
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    evaluation = Evaluation(
        "val",
        {"primary": sum(scores) / len(scores)},
        {"input_tokens": 90.0 * len(scores), "output_tokens": 10.0 * len(scores)},
        examples=len(scores),
        example_ids=list(EXAMPLES),
        example_scores=scores,
        share=len(EXAMPLES),
        increments=[Increment(iteration, len(scores), Spend(float(len(scores))))],
    )
    run.record_evaluation(
        dataclasses.replace(candidate, status=EVALUATED, evaluation=evaluation, trace=run.relative(trace))
    )
    return Candidate(cid, parent, iteration, "", EVALUATED, evaluation=evaluation)


def record_run(path: Path, seed: int, iterations: int = 3) -> Path:
    """A recorded run: a seed, then 5 revisions of the best an iteration (two with new prompts, two that only
    post-process, one copy), every one scored in full; 6 example-evaluations of predictions an iteration."""
    run = RunDirectory.open(path, CONFIG)
    try:
        programs = {"c001": Program("p0", "s0", 0.4)}
        best = _record(run, "c001", None, 0, programs["c001"], None)
        number = 2
        for iteration in range(1, iterations + 1):
            parent = programs[best.id]
            children = [
                Program(f"p{seed}-{iteration}a", f"a{seed}{iteration}", parent.rate + 0.15),
                Program(f"p{seed}-{iteration}b", f"b{seed}{iteration}", parent.rate - 0.1),
                Program(parent.prompt, f"c{seed}{iteration}", parent.rate + 0.05),
                Program(parent.prompt, f"d{seed}{iteration}", parent.rate - 0.05),
                parent,
            ]
            scored = []
            for child in children:
                cid = f"c{number:03d}"
                number += 1
                programs[cid] = child
                scored.append(_record(run, cid, best.id, iteration, child, predicted=child.rate))
            best = max([best, *scored], key=lambda c: c.score)
            append_jsonl(
                run.summary_path,
                {"type": "phase", "iteration": iteration, "phase": "predict", "spend": Spend(6, 600, 0).to_json()},
            )
    finally:
        run.close()
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("recorded")
    return [record_run(root / f"run{k}", k) for k in range(2)]


def test_a_recorded_run_loads_with_its_scores_outputs_calls_and_prediction_spend(runs: list[Path]) -> None:
    study = load_study("replay_study")
    run = study.load(runs[0])
    assert run.examples == EXAMPLES and run.iterations == 3 and len(run.candidates) == 16
    assert all(c.evaluation is None for c in run.candidates)
    assert run.predicting == {t: Spend(6, 600, 0) for t in (1, 2, 3)}
    copy, post = run.candidates[5], run.candidates[3]  # c006 copies c001; c004 post-processes it
    assert run.outputs[copy.id] == run.outputs["c001"]
    assert [c.key for c in run.calls[post.id]["e00"]] == [c.key for c in run.calls["c001"]["e00"]]


def test_an_archived_run_loads_as_the_run_directory_it_was(runs: list[Path], tmp_path) -> None:
    """Recorded runs are committed archived (a git bundle and the files beside it); the replay restores them."""
    study = load_study("replay_study")
    archive(runs[0], tmp_path / "run0")
    archived, original = study.load(tmp_path / "run0"), study.load(runs[0])
    assert archived.name == original.name == "run0"
    assert archived.scores == original.scores and archived.outputs == original.outputs
    assert archived.calls == original.calls and archived.predicting == original.predicting


def test_a_packed_run_loads_as_its_folder_and_packs_to_the_same_bytes(runs: list[Path], tmp_path) -> None:
    """Recorded runs are committed packed (one <name>.tar.xz each): the replay reads the file, or finds it from the
    name without the suffix (the commands in reports/replay/README.md), and unpacks nothing beside it."""
    study = load_study("replay_study")
    archive(runs[0], tmp_path / "folder" / "run0")
    packed = pack(tmp_path / "folder" / "run0", tmp_path / "packed" / "run0.tar.xz")
    os.utime(tmp_path / "folder" / "run0" / "repository.bundle", (1, 1))  # no time, owner or order gets in
    again = pack(tmp_path / "folder" / "run0", tmp_path / "again.tar.xz")
    assert packed.read_bytes() == again.read_bytes()
    folder = study.load(tmp_path / "folder" / "run0")
    for read in (study.load(packed), study.load(tmp_path / "packed" / "run0")):
        assert read.name == "run0" and read.candidates == folder.candidates and read.scores == folder.scores
        assert read.outputs == folder.outputs and read.calls == folder.calls and read.settings == folder.settings
    assert sorted(p.name for p in (tmp_path / "packed").iterdir()) == ["run0.tar.xz"]
    with pytest.raises(InputError, match="no packed run archive"):
        unpack(tmp_path / "folder" / "run0" / "repository.bundle", tmp_path / "cache")


def test_unpacking_happens_once_per_archive_content_and_refuses_what_pack_never_writes(
    runs: list[Path], tmp_path
) -> None:
    archive(runs[0], tmp_path / "run0")
    packed = pack(tmp_path / "run0", tmp_path / "run0.tar.xz")
    first = unpack(packed, tmp_path / "cache")
    assert (
        first.name == "run0"
        and (first / "repository.bundle").read_bytes() == (tmp_path / "run0" / "repository.bundle").read_bytes()
    )
    (first / "marker").write_text("kept")
    assert unpack(packed, tmp_path / "cache") == first and (first / "marker").is_file()  # not unpacked again
    assert len(list((tmp_path / "cache").iterdir())) == 1
    hostile = tmp_path / "run1.tar.xz"
    with tarfile.open(hostile, "w:xz") as tar:
        tar.add(tmp_path / "run0" / "repository.bundle", arcname="../escaped.json")
    with pytest.raises(InputError, match="not unpacked"):
        unpack(hostile, tmp_path / "cache")
    assert not (tmp_path / "escaped.json").exists()


def test_every_policy_keeps_its_budget_with_predictions_charged_only_to_the_policies_that_read_them(
    runs: list[Path],
) -> None:
    study = load_study("replay_study")
    run = study.load(runs[0])
    for policy in (*study.ARMS, study.BLIND_PLANNER):
        order = study._order(run, 0, 1 / 3)
        replay = study.Replay(run, policy, order, 2.0)
        replay.iterate(0)
        for iteration in (1, 2, 3):
            before = replay.spent.evals
            replay.iterate(iteration)
            assert replay.spent.evals - before <= 2 * order.share + 1e-9, policy
        reads = policy not in (*study.PREDICTION_FREE, study.BLIND_PLANNER)
        assert replay.predicted == (Spend(18, 1800, 0) if reads else Spend()), policy
        assert study.frontier.best(replay.candidates).supported


def test_the_blind_planner_decides_with_every_prediction_removed(runs: list[Path], monkeypatch) -> None:
    """``planner-blind`` (what the predictions bought) is the planner's policy on `Standing.blind`."""
    study = load_study("replay_study")
    run = study.load(runs[0])
    seen: list[bool] = []

    def spy(standing, policy, **options):
        seen.append(all(c.prediction is None for c in standing.candidates))
        assert policy == "planner"
        return decide(standing, policy, **options)

    monkeypatch.setattr(study, "decide", spy)
    replay = study.Replay(run, study.BLIND_PLANNER, study._order(run, 0, 1 / 3), 2.0)
    replay.iterate(0)
    replay.iterate(1)
    assert seen and all(seen)


def test_a_post_processing_revision_is_scored_free_on_its_parents_examples(runs: list[Path]) -> None:
    study = load_study("replay_study")
    run = study.load(runs[0])
    replay = study.Replay(run, "best-of-n", study._order(run, 1, 1 / 3), 3.0)
    replay.iterate(0)
    replay.add(1)
    by_id = {c.id: c for c in replay.candidates}
    assert by_id["c004"].evaluation is not None and by_id["c004"].evaluation.supported  # post-processing: free
    assert by_id["c006"].evaluation is not None and by_id["c006"].evaluation.supported  # the copy: free
    assert by_id["c002"].evaluation is None  # new prompts: nothing recorded yet
    assert replay.spent == Spend()


def test_a_prediction_never_reads_the_judge_examples(runs: list[Path]) -> None:
    """A recorded replayed prediction is the candidate's score on all the recording's examples, judge examples
    included: the replay remakes it on the examples its base was scored on in the replay (none when the base is
    unscored there), and re-anchors a prior prediction's gain on the base's score in the replay."""
    study = load_study("replay_study")
    run = study.load(runs[0])
    full = {cid: sum(scores.values()) / len(scores) for cid, scores in run.scores.items()}
    exact = Prediction(score=full["c004"], std=0.0, base="c001", repeat=1.0, extra={"predicted_by": "replay"})
    run.candidates = [dataclasses.replace(c, prediction=exact) if c.id == "c004" else c for c in run.candidates]
    order = study._order(run, 0, 1 / 3)
    search = [run.scores["c004"][i] for i in order.search]
    assert sum(search) / len(search) != pytest.approx(full["c004"])  # the fixture can tell the two apart
    unscored = study.Replay(run, "greedy", order, 3.0)
    unscored.add(0)  # the seed committed, not scored
    unscored.add(1)
    made = {c.id: c.prediction for c in unscored.candidates}
    assert made["c004"] is not None and made["c004"].score is None
    replay = study.Replay(run, "greedy", order, 3.0)
    replay.iterate(0)
    replay.add(1)
    made = {c.id: c.prediction for c in replay.candidates}
    assert made["c004"] is not None and made["c004"].score == pytest.approx(sum(search) / len(search))
    seed = [run.scores["c001"][i] for i in order.search]
    recorded_gain = 0.55 - full["c001"]  # c002 was predicted at its rate, 0.4 + 0.15
    assert made["c002"] is not None and made["c002"].score == pytest.approx(sum(seed) / len(seed) + recorded_gain)


def test_the_study_summarises_with_intervals_over_replicates_runs_and_iterations(runs: list[Path], tmp_path) -> None:
    study = load_study("replay_study")
    out = tmp_path / "out"
    results = study.main([*map(str, runs), "--replicates", "3", "--episodes", "--identity", "off", "--out", str(out)])
    sequential = results["sequential"]
    assert set(sequential["runs"]) == {"run0", "run1"}
    run0 = sequential["runs"]["run0"]
    assert set(run0["planner_minus"]) == set(study.ARMS) - {"planner"}
    assert all(len(v) == 3 for v in run0["planner_minus"].values())
    assert set(sequential["over_runs"]) == set(study.ARMS) - {"planner"}
    assert results["episodes"]["episodes"] == 6
    assert (out / "results.json").exists() and "Over the recorded runs" in (out / "results.md").read_text()
    assert sequential["pooled"]["of"] == 2 and "Mean over the runs" in (out / "results.md").read_text()
    written = (out / "results.md").read_text()
    stored = json.loads((out / "results.json").read_text())
    del stored["sequential"]["pooled"]  # as a replay made before the pooled summary existed
    (out / "results.json").write_text(json.dumps(stored))
    rewritten = study.main(["--rewrite", str(out)])
    assert rewritten["sequential"]["pooled"] == json.loads(json.dumps(sequential["pooled"]))
    assert (out / "results.md").read_text() == written
    with pytest.raises(SystemExit, match="no results.json"):
        study.main(["--rewrite", str(tmp_path / "nothing")])


def test_a_run_not_scored_in_full_is_refused(tmp_path) -> None:
    study = load_study("replay_study")
    run = RunDirectory.open(tmp_path / "partial", CONFIG)
    try:
        _record(run, "c001", None, 0, Program("p", "s", 0.5), None)
        candidate = Candidate("c002", "c001", 1, "x", IMPLEMENTED, summary="x")
        run.commit(candidate)
        part = Evaluation("val", {"primary": 1.0}, examples=1, example_ids=["e00"], example_scores=[1.0], share=15)
        run.record_evaluation(dataclasses.replace(candidate, status=EVALUATED, evaluation=part))
    finally:
        run.close()
    with pytest.raises(InputError, match="c002 was scored on 1 of the 15"):
        study.load(tmp_path / "partial")


def test_the_bootstrap_and_the_reach() -> None:
    study = load_study("replay_study")
    mean, low, high = study.bootstrap([[0.1, 0.2, 0.3], [0.0, 0.1, 0.2]])
    assert mean == pytest.approx(0.15) and low < mean < high
    assert study.reach([0.5, 0.6, 0.7], [10, 20, 30], 0.65) == 25.0
    assert study.reach([0.5, 0.6], [10, 20], 0.9) is None


def test_the_runs_pooled_reach_greedys_mean_final_score_and_count_the_runs_within_half() -> None:
    study = load_study("replay_study")

    def run(planner: list[float], greedy: list[float], reach: dict[str, float | None]) -> dict[str, object]:
        evals = {"planner": [10.0, 20.0, 30.0], "greedy": [60.0, 120.0, 180.0]}
        curves = {p: {"judged": j, "evals": evals[p]} for p, j in (("planner", planner), ("greedy", greedy))}
        return {"curves": curves, "reach": reach}

    pooled = study._pooled(
        {
            "a": run([0.5, 0.6, 0.7], [0.5, 0.5, 0.6], {"planner": 20.0, "greedy": 180.0}),
            "b": run([0.5, 0.5, 0.5], [0.6, 0.6, 0.6], {"planner": None, "greedy": 60.0}),
        }
    )
    assert pooled["curves"]["planner"]["judged"] == [0.5, 0.55, 0.6]
    assert pooled["goal"] == pytest.approx(0.6)
    assert pooled["reach"] == {"planner": 30.0, "greedy": 180.0}  # greedy: 0.55, 0.55, 0.6
    assert (pooled["half"], pooled["of"]) == (1, 2)


# --- the identity check ----------------------------------------------------------------------------------------
def record_identity_run(path: Path) -> Path:
    """Two seeds (c001 reads the model's answers, each of 5 tokens under a limit of 24; c002 is model-free) and one
    iteration of five children: c003 only raises c001's limit to 64 and c004 changes c002's prompt (both output what
    their parents do and no model call can change that), c005 changes c001's prompt and happens to output what c001
    does, c006 changes c001's prompt and its outputs, c007 cuts c001's limit to 4, below its answers."""
    run = RunDirectory.open(path, CONFIG)
    try:
        reads, free = Program("pA", "a", 0.4, 24, 5), Program("pB", "b", 0.5, 24, 5)
        _record(run, "c001", None, 0, reads, None)
        _record(run, "c002", None, 0, free, None)
        children = [
            ("c003", "c001", dataclasses.replace(reads, max_tokens=64), "answer_tokens"),
            ("c004", "c002", dataclasses.replace(free, prompt="pB2"), "prompt"),
            ("c005", "c001", dataclasses.replace(reads, prompt="pA2"), "prompt"),
            ("c006", "c001", Program("pA3", "c", 0.6, 24, 5), "prompt"),
            ("c007", "c001", Program("pA", "d", 0.3, 4, 4), "answer_tokens"),
        ]
        for cid, parent, program, family in children:
            _record(run, cid, parent, 1, program, predicted=program.rate, family=family)
    finally:
        run.close()
    return path


FREE = {"c002": frozenset(EXAMPLES), "c004": frozenset(EXAMPLES)}  # the model-free check's verdicts


def test_the_identity_check_charges_nothing_for_outputs_no_model_call_can_change(tmp_path) -> None:
    """With the check, a model-free candidate's examples and a call that repeats a stopped answer under a larger
    limit cost nothing, so the parent-identical spend is the prompt change whose outputs happened to equal its
    parent's (no check can know that in advance); without it, every child is charged, as the replays before it."""
    study = load_study("replay_study")
    run = study.load(record_identity_run(tmp_path / "run"))
    run.free = dict(FREE)
    wrong = next(i for i in study._order(run, 0, 1 / 3).search if run.scores["c004"][i] == 0.0)
    run.checked = {"c004": {wrong: 1.0}}  # where the check's output was not the model's: scored as the check did
    spent = {}
    for identity in (False, True):
        replay = study.Replay(run, "greedy", study._order(run, 0, 1 / 3), 10.0, identity=identity)
        replay.iterate(0)
        replay.iterate(1)
        spent[identity] = replay.identical()
        by_id = {c.id: c.evaluation for c in replay.candidates}
        assert all(by_id[c].examples == 10 for c in by_id)  # every candidate scored on its whole share
        assert by_id["c002"].model_free == by_id["c004"].model_free == identity
        scores = dict(zip(by_id["c004"].example_ids, by_id["c004"].example_scores, strict=True))
        assert scores[wrong] == (1.0 if identity else 0.0)
    assert spent[False] == {
        "charged": 50.0,
        "parent": 30.0,  # c003, c004, c005
        "parent_charged": 30.0,
        "same": 30.0,
        "kinds": {"answer_tokens": 10.0, "prompt": 20.0},
    }
    assert spent[True] == {
        "charged": 30.0,
        "parent": 10.0,
        "parent_charged": 10.0,
        "same": 10.0,
        "kinds": {"prompt": 10.0},
    }
    by_cid = {cid: len(ids) for cid, ids in replay.charged.items()}
    assert by_cid == {"c005": 10, "c006": 10, "c007": 10}  # c007's limit is below the answers' 5 tokens: new calls


def test_an_answer_cut_by_its_limit_stands_for_no_other_limit(tmp_path) -> None:
    study = load_study("replay_study")
    run = study.load(record_identity_run(tmp_path / "run"))
    replay = study.Replay(run, "greedy", study._order(run, 0, 1 / 3), 10.0)
    stem = "stem"
    cut = study.Call("k24", 100.0, 0.0, stem, 24.0, 24.0)  # used its whole limit: maybe cut
    replay._make([cut])
    assert not replay._made(study.Call("k64", 100.0, 0.0, stem, 64.0, 30.0))
    replay._make([study.Call("k32", 100.0, 0.0, stem, 32.0, 20.0)])  # stopped after 20 tokens
    assert replay._made(study.Call("k64", 100.0, 0.0, stem, 64.0, 20.0))
    assert replay._made(study.Call("k20", 100.0, 0.0, stem, 20.0, 20.0))
    assert not replay._made(study.Call("k16", 100.0, 0.0, stem, 16.0, 16.0))
    off = study.Replay(run, "greedy", study._order(run, 0, 1 / 3), 10.0, identity=False)
    off._make([study.Call("k32", 100.0, 0.0, stem, 32.0, 20.0)])
    assert not off._made(study.Call("k64", 100.0, 0.0, stem, 64.0, 20.0))


def test_the_study_reports_the_identical_spend_with_and_without_the_check(tmp_path) -> None:
    """``--identity both``: the verdicts come from the checks' cache (a valid one: no check is made again), and the
    report says where the spend went each way and what the check changed."""
    study = load_study("replay_study")
    path = record_identity_run(tmp_path / "run")
    run = study.load(path)
    checks = tmp_path / "checks"
    checks.mkdir()
    verdicts = {
        c.id: {"source": study._digest(c.source), "free": sorted(FREE.get(c.id, ())), "seconds": 1.5, "mismatched": {}}
        for c in run.candidates
    }
    cache = {
        "format": study.FORMAT,
        "check_code": study._check_code(),
        "examples": run.examples,
        "candidates": verdicts,
    }
    (checks / "run.json").write_text(json.dumps(cache))
    out = tmp_path / "out"
    args = [str(path), "--replicates", "3", "--policies", "greedy,planner", "--evals-per-iter", "10"]
    results = study.main([*args, "--identity", "both", "--checks", str(checks), "--out", str(out)])
    assert results["checks"]["checked_now"] == 0 and results["checks"]["sandbox_seconds"] == 10.5
    assert results["checks"]["model_free"] == 2
    greedy = results["identical"]
    assert greedy["off"]["over_runs"]["greedy"]["parent"][0] == pytest.approx(0.3)  # of a budget of 100
    assert greedy["on"]["over_runs"]["greedy"]["parent"][0] == pytest.approx(0.1)
    assert greedy["on"]["kinds"]["greedy"] == {"prompt": 10.0}
    assert results["bought"]["over_runs"]["greedy"]["evals"][0] == pytest.approx(-20.0)
    written = (out / "results.md").read_text()
    for heading in ("without the identity check", "with the identity check", "What the identity check changed"):
        assert heading in written
    assert "The model-free checks" in written


def test_the_model_free_check_runs_once_per_candidate_and_is_read_back(tmp_path, monkeypatch) -> None:
    """The check itself, in the sandbox over the stand-in on a recorded run of the toy task: a harness that ignores
    the model's answer is free on every example, one that reads it on none; the verdicts are kept and a second
    replay reads them instead of checking again."""
    study = load_study("replay_study")
    ignores = harness(answer="'[DIAGNOSIS]' + ('dengue' if 'fever' in x else 'psoriasis') + '[/DIAGNOSIS]'")
    task = ToyTask()
    examples = task.load("val")
    run = RunDirectory.open(tmp_path / "toy", CONFIG)
    try:
        for cid, source in (("c001", harness(answer=TAGGED)), ("c002", ignores)):
            candidate = Candidate(cid, None, 0, source, IMPLEMENTED, summary=cid)
            run.commit(candidate)
            records = [
                {
                    "id": e.id,
                    "prediction": "[DIAGNOSIS]" + ("dengue" if "fever" in e.input else "psoriasis") + "[/DIAGNOSIS]",
                    "scores": {"primary": 1.0},
                    "calls": [{"messages": [], "options": {"temperature": 0}, "response": "psoriasis"}],
                }
                for e in examples
            ]
            trace = run.trace_path(cid, "val")
            trace.write_text("".join(json.dumps(r) + "\n" for r in records))
            ids = [e.id for e in examples]
            evaluation = Evaluation("val", {"primary": 1.0}, examples=3, example_ids=ids, example_scores=[1.0] * 3)
            run.record_evaluation(
                dataclasses.replace(candidate, status=EVALUATED, evaluation=evaluation, trace=run.relative(trace))
            )
    finally:
        run.close()
    recorded = study.load(tmp_path / "toy")
    found = study.check_run(recorded, tmp_path / "checks", task=task)
    assert recorded.free == {"c001": frozenset(), "c002": frozenset(e.id for e in examples)}
    assert (found["checked_now"], found["model_free"], found["mismatched"]) == (2, 1, 0)
    assert found["sandbox_seconds"] > 0

    def refused(*args, **kwargs):
        raise AssertionError("a cached verdict was checked again")

    monkeypatch.setattr(study, "ModelFreeCheck", refused)
    again = study.load(tmp_path / "toy")
    assert study.check_run(again, tmp_path / "checks", task=task)["checked_now"] == 0
    assert again.free == recorded.free
