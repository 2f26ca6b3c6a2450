"""An experiment's results: per-run figures, the table's arithmetic over seeds and datasets, failed and torn cells
in cells.jsonl, RESULTS.md / results.json, and results.html opening in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser import CHROMIUM, assert_renders_cleanly

from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.errors import InputError
from metaharness.experiment.page import write_results
from metaharness.experiment.results import experiment_table, run_figures
from metaharness.store import RunDirectory
from metaharness.store.files import append_jsonl


def make_run(path: Path, scores, *, predicted=None, tokens=100, usd=0.0, test=None, failed_at=None):
    """A run with one evaluated candidate per iteration (``scores[i]`` in iteration i), an optional prediction per
    candidate, one spend line of ``tokens`` and ``usd``, iteration lines with the best so far, and a test score of
    the best candidate."""
    rd = RunDirectory.open(path, {"dataset": "toy", "task_model": "fake", "val_limit": 5, "proposer": "x"})
    best, best_id = None, None
    for it, score in enumerate(scores):
        cid = f"c{it + 1:03d}"
        guess = predicted[it] if predicted else None
        ev = Evaluation("val", {"primary": score}, {"input_tokens": 10, "output_tokens": 1}, 5)
        rd.commit(
            Candidate(
                cid,
                None,
                it,
                "class Harness: pass\n",
                status="evaluated",
                summary=cid,
                evaluation=ev,
                prediction=None if guess is None else Prediction(score=guess),
            )
        )
        if best is None or score > best:
            best, best_id = score, cid
        if it == failed_at:
            rd.commit(Candidate("c100", None, it, "x", status="failed", error="boom", prediction=Prediction(score=1)))
        append_jsonl(rd.summary_path, {"type": "iteration", "iteration": it, "best": best_id, "best_score": best})
    rd.spend.record("fake", "task", usd, input_tokens=tokens - 1, output_tokens=1)
    if test is not None:
        assert best_id is not None
        rd.save_split_result(best_id, "test", Evaluation("test", {"primary": test}, {}, 20))
    rd.close()


def cell_line(dataset, proposer, seed, status="done", error=None):
    cell = f"{dataset}/{proposer}/seed{seed}"
    return {
        "cell": cell,
        "dataset": dataset,
        "proposer": proposer,
        "seed": seed,
        "run_dir": cell,
        "status": status,
        "error": error,
        "seconds": 1.0,
        "finished": "2026-12-01T00:00:00Z",
    }


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    """Datasets A and B, proposers base and tps, seeds 0 and 1; A/tps/seed1 failed, B/tps/seed1 failed then done,
    and a torn last line in cells.jsonl."""
    root = tmp_path_factory.mktemp("exp")
    spec = {"datasets": ["A", "B"], "proposers": ["base", "tps"], "seeds": [0, 1], "iterations": 1}
    (root / "experiment.json").write_text(json.dumps(spec))
    runs = {
        ("A", "base", 0): dict(scores=[0.2, 0.4], tokens=100, usd=0.01, test=0.3, failed_at=1),
        ("A", "base", 1): dict(scores=[0.3, 0.2], tokens=300, usd=0.03),
        ("A", "tps", 0): dict(scores=[0.2, 0.5], predicted=[None, 0.4], tokens=200, test=0.45),
        ("B", "base", 0): dict(scores=[0.6, 0.6], tokens=100, test=0.5),
        ("B", "base", 1): dict(scores=[0.5, 0.7], tokens=100, test=0.6),
        ("B", "tps", 0): dict(scores=[0.6, 0.8], predicted=[0.5, 0.9], tokens=100),
        ("B", "tps", 1): dict(scores=[0.7, 0.9], predicted=[0.7, 0.6], tokens=100),
    }
    cells = root / "cells.jsonl"
    append_jsonl(cells, cell_line("B", "tps", 1, "failed", "first attempt died"))
    for (dataset, proposer, seed), figures in runs.items():
        make_run(root / dataset / proposer / f"seed{seed}", **figures)
        append_jsonl(cells, cell_line(dataset, proposer, seed))
    append_jsonl(cells, cell_line("A", "tps", 1, "failed", "proposer raised: boom"))
    with cells.open("a") as f:
        f.write('{"cell": "A/base/seed0", "status": "fail')  # a kill tore the last line
    return root


def test_run_figures_read_the_run_directory(exp):
    figures = run_figures(exp / "A" / "base" / "seed0")
    assert figures == {
        "best_id": "c002",
        "best_val": 0.4,
        "test": 0.3,
        "evals": 0.0,
        "judged": None,
        "tokens": 100.0,
        "usd": 0.01,
        "mae": None,
        "curve": [[0, 0.2], [1, 0.4]],
        "iterations": 2,
        "candidates": 3,
        "failed": 1,
    }
    tps = run_figures(exp / "B" / "tps" / "seed1")
    assert tps["test"] is None  # the run did not evaluate its best on the test split
    assert tps["mae"] == pytest.approx((0.0 + 0.3) / 2)


def test_table_means_and_sample_sd_over_seeds(exp):
    table = experiment_table(exp)
    base = table["datasets"]["A"]["base"]
    assert base["runs"] == 2 and base["seeds"] == [0, 1]
    assert base["best_val"]["mean"] == pytest.approx(0.35)
    assert base["best_val"]["sd"] == pytest.approx(0.0707107, abs=1e-6)  # sample sd: |0.4 - 0.3| / sqrt(2)
    assert base["test"] == {"mean": 0.3, "sd": None, "n": 1, "ci95": None}  # seed 1 has no test score
    assert base["tokens"]["mean"] == 200 and base["tokens"]["sd"] == pytest.approx(141.4213562)
    assert base["usd"]["mean"] == pytest.approx(0.02)
    assert base["mae"] == {"mean": None, "sd": None, "n": 0, "ci95": None}
    assert base["curve"] == [[0, pytest.approx(0.25)], [1, pytest.approx(0.35)]]
    tps_b = table["datasets"]["B"]["tps"]
    assert tps_b["mae"]["mean"] == pytest.approx((0.1 + 0.15) / 2)
    assert tps_b["curve"] == [[0, pytest.approx(0.65)], [1, pytest.approx(0.85)]]


def test_failed_cell_listed_last_line_wins_and_torn_line_ignored(exp):
    table = experiment_table(exp)
    assert table["failed"] == [
        {"cell": "A/tps/seed1", "dataset": "A", "proposer": "tps", "seed": 1, "error": "proposer raised: boom"}
    ]
    # B/tps/seed1 failed first, then finished: its last line counts; the torn A/base/seed0 line is skipped
    assert table["datasets"]["B"]["tps"]["runs"] == 2 and table["datasets"]["A"]["base"]["runs"] == 2
    assert table["datasets"]["A"]["tps"]["seeds"] == [0]


def test_average_over_datasets(exp):
    average = experiment_table(exp)["average"]
    base = average["base"]
    assert base["runs"] == 4 and base["datasets"] == 2
    assert base["best_val"]["mean"] == pytest.approx((0.35 + 0.65) / 2)
    # per seed across datasets: seed 0 (0.4 + 0.6) / 2, seed 1 (0.3 + 0.7) / 2, both 0.5
    assert base["best_val"]["sd"] == pytest.approx(0.0) and base["best_val"]["n"] == 2
    # test: only seed 0 has it in both datasets; the mean is still over the per-dataset means (0.3 and 0.55)
    assert base["test"] == {"mean": pytest.approx(0.425), "sd": None, "n": 1, "ci95": None}
    tps = average["tps"]
    assert tps["seeds"] == [0]  # seed 1 failed on A
    assert tps["best_val"] == {"mean": pytest.approx((0.5 + 0.85) / 2), "sd": None, "n": 1, "ci95": None}
    assert tps["curve"] == [[0, pytest.approx((0.2 + 0.65) / 2)], [1, pytest.approx((0.5 + 0.85) / 2)]]


def test_paired_differences_by_seed_over_datasets(exp):
    (pair,) = experiment_table(exp)["paired"]
    # seed 0 is the only seed both have in every dataset (A/tps/seed1 failed): ((0.4 - 0.5) + (0.6 - 0.8)) / 2
    assert (pair["a"], pair["b"]) == ("base", "tps")
    assert pair["difference"] == {"mean": pytest.approx(-0.15), "sd": None, "n": 1, "ci95": None}
    # runs both have: A seed 0, B seeds 0 and 1, base below tps in all three
    assert (pair["better"], pair["tied"], pair["worse"]) == (0, 0, 3)


def test_write_results_markdown_and_json(exp):
    path = write_results(exp)
    text = path.read_text()
    assert path.name == "RESULTS.md"
    assert (
        "| proposer | runs | best val mean (sd) | judged mean (sd) | test mean (sd) | val evals | tokens | USD | "
        "\\|pred-actual\\| |"
    ) in text
    assert "| base | 2 | 0.350 (0.071) | - | 0.300 | 0 (0) | 200 (141) | 0.0200 (0.0141) | - |" in text
    assert "## Average over datasets" in text and "| tps | 3 | 0.675 | - | 0.450 |" in text
    assert "| A/tps/seed1 | proposer raised: boom |" in text
    assert "| base - tps | 1 | -0.150 | - | 0 / 0 / 3 |" in text
    saved = json.loads((exp / "results.json").read_text())
    assert saved["average"]["base"]["best_val"]["mean"] == pytest.approx(0.5)
    assert (exp / "results.html").exists()


def test_not_an_experiment_folder(tmp_path):
    with pytest.raises(InputError, match="not an experiment folder"):
        experiment_table(tmp_path)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (CI installs Debian's chromium)")
def test_results_page_opens_in_headless_chromium_without_errors(exp, tmp_path):
    write_results(exp)
    page = exp / "results.html"
    text = page.read_text()
    assert not re.search(r"\b(src|href)\s*=", text) and text.count("<svg") == 3  # A, B, average
    assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert_renders_cleanly(page, tmp_path)
