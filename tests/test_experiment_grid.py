"""The experiment grid with a fake cell (no model): planning, resume after a kill, failed cells, the spec check,
a torn cells.jsonl line, parallel cells, the cost estimate and the CLI's option errors."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from command_line import assert_fails_cleanly, assert_usage_error, run_metaharness

from metaharness.budget import Budget
from metaharness.errors import ConfigurationError, InputError
from metaharness.experiment import Cell, estimate_cost, experiment_spec, plan_grid, read_cells, run_experiment
from metaharness.experiment.grid import CELLS_FILE, LOCK_FILE, SPEC_FILE, CellRecord, ExperimentSpec
from metaharness.runner.settings import SettingsChange

SPEC = experiment_spec(["lawbench", "uspto"], ["offline", "offline-greedy"], [0, 1], iterations=2, val_limit=3)


def journal(run_dir: Path, cell: Cell, spec: ExperimentSpec) -> None:
    """The fake cell: one line per call in EXP/calls.log, and its run directory."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parents[2] / "calls.log", "a") as log:
        log.write(cell.name + "\n")


def fake_cell(cell: Cell, run_dir: Path, spec: ExperimentSpec) -> None:
    journal(run_dir, cell, spec)


def calls(exp: Path) -> list[str]:
    return (exp / "calls.log").read_text().split()


def lines(exp: Path) -> list[dict]:
    return [json.loads(line) for line in (exp / CELLS_FILE).read_text().splitlines()]


def test_plan_grid_is_every_cell_dataset_major():
    cells = plan_grid(["a", "b"], ["p", "q"], [0, 1, 2])
    assert len(cells) == 12 and len(set(cells)) == 12
    assert [c.name for c in cells[:4]] == ["a/p/seed0", "a/p/seed1", "a/p/seed2", "a/q/seed0"]
    assert cells[-1] == Cell("b", "q", 2) and cells[-1].name == "b/q/seed2"


def test_a_grid_runs_every_cell_once_and_a_rerun_skips_them(tmp_path):
    exp = tmp_path / "exp"
    records = run_experiment(exp, SPEC, run_cell=fake_cell)
    names = [c.name for c in plan_grid(SPEC.datasets, SPEC.proposers, SPEC.seeds)]
    assert [r.cell for r in records] == names and {r.status for r in records} == {"done"}
    assert sorted(calls(exp)) == sorted(names)
    assert (exp / "lawbench/offline/seed1").is_dir()
    stored = json.loads((exp / SPEC_FILE).read_text())
    assert {k: stored[k] for k in SPEC.to_json()} == SPEC.to_json() and "created" in stored and "metaharness" in stored
    assert run_experiment(exp, SPEC, run_cell=fake_cell) == records  # same spec: nothing left to run
    assert len(calls(exp)) == len(names) and len(lines(exp)) == len(names)


def test_the_default_cell_is_optimize_with_the_cells_seed_and_its_share_of_the_cap(tmp_path, monkeypatch):
    import metaharness.experiment.grid

    searches: list[tuple[Path, SettingsChange, dict[str, Any]]] = []
    monkeypatch.setattr(
        metaharness.experiment.grid, "optimize", lambda run_dir, config, **kw: searches.append((run_dir, config, kw))
    )
    spec = {**SPEC.to_json(), "max_cost": 4.0, "options": {"probe_size": 2}, "test": False}
    run_experiment(tmp_path / "exp", spec, data_dir=tmp_path / "data")
    assert len(searches) == 8
    run_dir, config, kw = searches[5]  # uspto/offline/seed1
    assert run_dir == tmp_path / "exp/uspto/offline/seed1"
    assert (config.dataset, config.proposer, config.val_limit, config.evals_per_iter, config.seed) == (
        "uspto",
        "offline",
        3,
        3,
        1,
    )
    assert config.proposer_model is None and config.task_model == SPEC.template.task_model
    assert config.proposer_options == {"probe_size": 2}
    assert config.evaluation == "best-of-n" and config.holdout == 0  # a spec without arms: the runs before arms
    assert config.per_run == Budget(usd=0.5)  # the cell's share of the cap
    assert kw == {"iterations": 2, "test": False, "data_dir": tmp_path / "data", "raise_caps": True}


def test_arms_are_cells_at_equal_spend_with_the_holdout(tmp_path, monkeypatch):
    import metaharness.experiment.grid

    searches: list[tuple[Path, SettingsChange]] = []
    monkeypatch.setattr(
        metaharness.experiment.grid, "optimize", lambda run_dir, config, **kw: searches.append((run_dir, config))
    )
    spec = {
        **SPEC.to_json(),
        "datasets": ["uspto"],
        "seeds": [0],
        "arms": ["planner", "gate"],
        "holdout": 2,
        "test": False,
    }
    run_experiment(tmp_path / "exp", spec)
    assert [(d.relative_to(tmp_path / "exp").as_posix(), c.evaluation) for d, c in searches] == [
        ("uspto/offline/planner/seed0", "planner"),
        ("uspto/offline/gate/seed0", "gate"),
        ("uspto/offline-greedy/planner/seed0", "planner"),
        ("uspto/offline-greedy/gate/seed0", "gate"),
    ]
    assert {c.evals_per_iter for _, c in searches} == {3} and {c.holdout for _, c in searches} == {2}
    lines = [json.loads(x) for x in (tmp_path / "exp" / "cells.jsonl").read_text().splitlines()]
    assert [r["label"] for r in lines] == [
        "offline/planner",
        "offline/gate",
        "offline-greedy/planner",
        "offline-greedy/gate",
    ]


def test_each_cell_enters_the_cluster_for_its_own_evaluations(tmp_path, monkeypatch):
    import contextlib

    import metaharness.experiment.grid

    entered: list[tuple[str | None, str | None]] = []

    @contextlib.contextmanager
    def recording(dask_scheduler, ray_address):
        entered.append((dask_scheduler, ray_address))
        yield

    monkeypatch.setattr(metaharness.experiment.grid, "cluster", recording)
    monkeypatch.setattr(
        metaharness.experiment.grid, "optimize", lambda run_dir, config, **kw: entered.append(("ran", None))
    )
    spec = {**SPEC.to_json(), "datasets": ["uspto"], "proposers": ["offline"], "seeds": [0, 1], "test": False}
    run_experiment(tmp_path / "exp", spec, dask_scheduler="tcp://127.0.0.1:8786")
    assert entered == [("tcp://127.0.0.1:8786", None), ("ran", None)] * 2


def test_bench_harness_refuses_an_unreachable_scheduler_before_any_cell(tmp_path):
    out = run_metaharness(
        "bench",
        "harness",
        "--out",
        tmp_path / "exp",
        "--dask-scheduler",
        "tcp://127.0.0.1:9",
        cwd=tmp_path,
        timeout=120,
    )
    assert_fails_cleanly(out, "Cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    assert not (tmp_path / "exp").exists()


def test_a_capped_cell_is_recorded_capped_and_continues_with_a_larger_cap(tmp_path):
    from metaharness.search.loop import Outcome

    calls: list[str] = []

    def capped(cell, run_dir, spec):
        calls.append(cell.name)
        return Outcome(iterations_done=1, stopped="cost cap reached", best=None, frontier=[], capped=True)

    spec = {**SPEC.to_json(), "datasets": ["uspto"], "proposers": ["offline"], "seeds": [0], "max_cost": 1.0}
    first = run_experiment(tmp_path / "exp", spec, run_cell=capped)
    assert [(r.status, r.iterations, r.stopped) for r in first] == [("capped", 1, "cost cap reached")]
    run_experiment(tmp_path / "exp", spec, run_cell=capped)  # not done: tried again (it stops again at once)
    assert len(calls) == 2
    with pytest.raises(InputError, match="max_cost"):
        run_experiment(tmp_path / "exp", {**spec, "max_cost": 0.5}, run_cell=capped)  # a smaller cap is refused
    done = run_experiment(tmp_path / "exp", {**spec, "max_cost": 2.0}, run_cell=lambda *a: None)
    assert [r.status for r in done] == ["done"]
    stored = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    assert stored["max_cost"] == 2.0 and stored["extended"][-1] == {**stored["extended"][-1], "from": 1.0, "to": 2.0}


KILLED = """
import os, signal, sys
from pathlib import Path
from metaharness.experiment import experiment_spec, run_experiment

exp = Path(sys.argv[1])

def run_cell(cell, run_dir, spec):
    log = exp / "calls.log"
    before = log.read_text().split() if log.exists() else []
    with open(log, "a") as handle:
        handle.write(cell.name + "\\n")
    if len(before) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # this very process, in the middle of its third cell

run_experiment(exp, experiment_spec(**{SPEC!r}), run_cell=run_cell)
"""


def test_resume_after_a_kill_reruns_only_the_killed_and_the_unstarted_cells(tmp_path):
    exp = tmp_path / "exp"
    script = KILLED.replace("{SPEC!r}", repr(SPEC.to_json()))
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(exp)], capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    names = [c.name for c in plan_grid(SPEC.datasets, SPEC.proposers, SPEC.seeds)]
    assert [r["cell"] for r in lines(exp)] == names[:2]  # the killed cell left no line
    killed = names[2]

    records = run_experiment(exp, SPEC, run_cell=fake_cell)
    assert [r.cell for r in records] == names and {r.status for r in records} == {"done"}
    assert sorted(r["cell"] for r in lines(exp)) == sorted(names)  # every cell done exactly once
    ran = calls(exp)
    assert ran.count(killed) == 2 and all(ran.count(n) == 1 for n in names if n != killed)


def test_a_failed_cell_is_recorded_in_one_line_and_the_others_go_on(tmp_path):
    exp = tmp_path / "exp"

    def flaky(cell: Cell, run_dir: Path, spec: ExperimentSpec) -> None:
        journal(run_dir, cell, spec)
        if cell.name == "lawbench/offline-greedy/seed0":
            raise RuntimeError("endpoint\nunreachable")

    records = run_experiment(exp, SPEC, run_cell=flaky)
    failed = [r for r in records if r.status == "failed"]
    assert len(records) == 8 and [r.cell for r in failed] == ["lawbench/offline-greedy/seed0"]
    assert failed[0].error == "RuntimeError: endpoint unreachable"
    assert all(r.error is None for r in records if r.status == "done")

    rerun = run_experiment(exp, SPEC, run_cell=fake_cell)  # a resume retries the failed cell only
    assert {r.status for r in rerun} == {"done"} and len(calls(exp)) == 9
    assert read_cells(exp)["lawbench/offline-greedy/seed0"].status == "done"  # the last line wins


def test_another_spec_in_the_same_folder_is_refused_naming_the_differing_keys(tmp_path):
    exp = tmp_path / "exp"
    run_experiment(exp, SPEC, run_cell=fake_cell)
    other = {**SPEC.to_json(), "iterations": 1, "seeds": [0, 1, 2]}
    with pytest.raises(InputError) as refused:
        run_experiment(exp, other, run_cell=fake_cell)
    message = str(refused.value)
    assert "seeds: [0, 1] there, [0, 1, 2] now" in message and "iterations: 2 there, 1 now" in message
    assert "fewer cannot undo them" in message and "val_limit" not in message and len(calls(exp)) == 8
    with pytest.raises(InputError, match="seeds: ") as refused:  # more iterations are no difference, more seeds are
        run_experiment(exp, {**other, "iterations": 5}, run_cell=fake_cell)
    assert "iterations" not in str(refused.value) and len(calls(exp)) == 8


def test_more_iterations_continue_every_run_and_a_rerun_then_skips_them(tmp_path):
    exp = tmp_path / "exp"
    reached: list[tuple[str, int]] = []

    def upto(cell: Cell, run_dir: Path, spec: ExperimentSpec) -> None:
        journal(run_dir, cell, spec)
        reached.append((cell.name, spec.iterations))

    run_experiment(exp, SPEC, run_cell=upto)
    old = lines(exp)
    for record in old:  # cells.jsonl of an earlier version: no "iterations" (the folder's spec had 2)
        del record["iterations"]
    (exp / CELLS_FILE).write_text("".join(json.dumps(r) + "\n" for r in old))
    records = run_experiment(exp, {**SPEC.to_json(), "iterations": 4}, run_cell=upto)
    assert [n for n, i in reached if i == 4] == [r.cell for r in records] and len(reached) == 16
    assert {(r.status, r.iterations) for r in records} == {("done", 4)}
    stored = json.loads((exp / SPEC_FILE).read_text())
    assert stored["iterations"] == 4 and [(e["from"], e["to"]) for e in stored["extended"]] == [(2, 4)]
    assert run_experiment(exp, {k: stored[k] for k in stored}, run_cell=upto) == records and len(reached) == 16


WORKER_KILLER = """
import os, signal
from pathlib import Path

def run_cell(cell, run_dir, spec):
    run_dir.mkdir(parents=True, exist_ok=True)
    attempts = run_dir / "attempts"
    attempts.write_text(str(int(attempts.read_text() or 0) + 1) if attempts.exists() else "1")
    if cell.name in KILLED and (cell.name in ALWAYS or attempts.read_text() == "1"):
        os.kill(os.getpid(), signal.SIGKILL)  # the worker process that runs this cell
"""


@pytest.mark.parametrize("always", [False, True], ids=["once", "every time"])
def test_a_worker_that_dies_is_replaced_and_a_cell_that_kills_it_twice_fails_alone(tmp_path, monkeypatch, always):
    module = tmp_path / "worker_killer.py"
    killed = ["lawbench/offline-greedy/seed0"]
    module.write_text(f"KILLED = {killed!r}\nALWAYS = {killed if always else []!r}\n" + WORKER_KILLER)
    monkeypatch.syspath_prepend(str(tmp_path))  # the workers import the cell function by module name
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.delitem(sys.modules, "worker_killer", raising=False)
    worker_killer = importlib.import_module("worker_killer")

    records = run_experiment(tmp_path / "exp", SPEC, jobs=2, run_cell=worker_killer.run_cell)
    status = {r.cell: r.status for r in records}
    assert len(status) == 8 and all(s == "done" for c, s in status.items() if c not in killed)
    attempts = int((tmp_path / "exp" / killed[0] / "attempts").read_text())
    if always:
        (failed,) = [r for r in records if r.status == "failed"]
        assert failed.cell == killed[0] and "its worker process died twice" in str(failed.error)
        assert attempts == 2
    else:
        assert status[killed[0]] == "done" and attempts == 2
    assert len(lines(tmp_path / "exp")) == 8  # one line per cell: a worker's death is not a line


ORPHANS = """
import os, sys, time
from pathlib import Path
from metaharness.experiment import experiment_spec, run_experiment

exp = Path(sys.argv[1])

def run_cell(cell, run_dir, spec):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "pid").write_text(str(os.getpid()))
    time.sleep(120)

run_experiment(exp, experiment_spec(**{SPEC!r}), jobs=2, run_cell=run_cell)
"""


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_killing_the_experiment_process_stops_its_workers(tmp_path):
    exp = tmp_path / "exp"
    script = ORPHANS.replace("{SPEC!r}", repr(SPEC.to_json()))
    main = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(exp)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(pids := list(exp.glob("*/*/seed*/pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = [int(p.read_text()) for p in pids]
        assert len(workers) == 2 and main.pid not in workers and all(alive(w) for w in workers)
    finally:
        os.kill(main.pid, signal.SIGKILL)  # the experiment's own process, as a kill at any moment would
        main.wait(timeout=30)
    deadline = time.monotonic() + 20
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(w) for w in workers), "a worker outlived the killed experiment"
    assert not (exp / CELLS_FILE).exists()  # no cell finished: the rerun runs them all


def test_a_hosted_model_without_its_key_stops_the_grid_before_any_cell(tmp_path, monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    hosted = experiment_spec(
        ["uspto"], ["tps"], [0], iterations=1, task_model="local:smollm2-135m", proposer_model="anthropic:claude-x"
    )
    with pytest.raises(ConfigurationError, match="needs an Anthropic API key"):
        run_experiment(tmp_path / "exp", hosted)
    assert not (tmp_path / "exp").exists()


def test_a_folder_another_process_runs_is_refused(tmp_path):
    exp = tmp_path / "exp"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(exp / LOCK_FILE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(InputError, match="Another process is running the experiment"):
            run_experiment(exp, SPEC, run_cell=fake_cell)
    finally:
        holder.kill()
        holder.wait()
    assert not (exp / "calls.log").exists()
    assert len(run_experiment(exp, SPEC, run_cell=fake_cell)) == 8  # the lock went with the process


HOLD_LOCK = """
import fcntl, pathlib, sys, time
path = pathlib.Path(sys.argv[1])
path.parent.mkdir(parents=True)
handle = open(path, "w")
fcntl.flock(handle, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_a_torn_last_line_is_ignored_and_closed_off(tmp_path):
    exp = tmp_path / "exp"
    spec = {**SPEC.to_json(), "datasets": ["uspto"], "proposers": ["offline"]}
    run_experiment(exp, spec, run_cell=fake_cell)
    with open(exp / CELLS_FILE, "r+b") as log:  # seed1's line, torn by a kill in the middle of its write
        text = log.read()
        cut = text.rindex(b"\n", 0, len(text) - 1) + 1
        log.truncate(cut + 30)
    assert set(read_cells(exp)) == {"uspto/offline/seed0"}
    records = run_experiment(exp, spec, run_cell=fake_cell)
    assert [r.status for r in records] == ["done", "done"]
    assert calls(exp) == ["uspto/offline/seed0", "uspto/offline/seed1", "uspto/offline/seed1"]
    kept = (exp / CELLS_FILE).read_text().splitlines()
    assert len(kept) == 3 and json.loads(kept[2])["cell"] == "uspto/offline/seed1"  # the torn line stays alone


def test_cells_run_in_parallel_worker_processes(tmp_path):
    exp = tmp_path / "exp"

    def where(cell: Cell, run_dir: Path, spec: ExperimentSpec) -> None:
        run_dir.mkdir(parents=True)
        (run_dir / "pid").write_text(str(os.getpid()))

    started: list[str] = []
    finished: list[tuple[str, int]] = []

    class Progress:
        def cell_started(self, cell: Cell, done: int, total: int) -> None:
            started.append(cell.name)

        def cell_finished(self, cell: Cell, record: CellRecord, done: int, total: int) -> None:
            finished.append((cell.name, done))

    records = run_experiment(exp, SPEC, jobs=2, run_cell=where, progress=Progress())
    pids = {(exp / r.run_dir / "pid").read_text() for r in records}
    assert {r.status for r in records} == {"done"} and str(os.getpid()) not in pids
    assert sorted(started) == sorted(r.cell for r in records) and [d for _, d in finished] == list(range(1, 9))


def test_the_cost_estimate_prices_hosted_models_and_frees_local_ones():
    local = estimate_cost(SPEC)
    assert local.total == 0.0 and set(local.per_cell.values()) == {0.0}
    hosted = experiment_spec(
        ["uspto"], ["tps"], [0, 1], iterations=12, task_model="openai:gpt-4.1-mini", proposer_model="anthropic:x"
    )
    assert estimate_cost(hosted).total is None  # an unpriced proposer model: unknown, not $0
    named = replace(hosted, template=hosted.template.replace(proposer_model="anthropic:claude-sonnet-4-5"))
    task_only = replace(hosted, proposers=("offline",), template=hosted.template.replace(proposer_model=None))
    priced, task_only_cost = estimate_cost(named), estimate_cost(task_only)
    assert priced.total is not None and task_only_cost.total is not None and priced.total > task_only_cost.total > 0
    fewer = estimate_cost(replace(task_only, template=task_only.template.replace(val_limit=10)))
    assert fewer.total is not None and fewer.total < task_only_cost.total  # 10 examples instead of the assumed 100


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "0,x"], "--seed takes comma-separated integers"),
        (["--datasets", "gsm8k"], "--datasets: unknown task(s) gsm8k"),
        (["--proposers", "coding"], "needs a proposer model"),
        (["--max-cost", "-3"], "--max-cost takes an amount of USD >= 0"),
        (["--jobs", "0"], "--jobs takes a number of cells >= 1"),
        (["-P", "seed=4"], "'seed' is set per cell"),
        (["--proposer-model", "anthropic:claude-sonnet-4-5"], "needs an Anthropic API key"),
        (
            ["--evaluation", "planner,magic"],
            "Unknown arm(s) magic: use planner, greedy, best-of-n, halving, gate, threshold, thompson.",
        ),
        (["--val-limit", "3", "-P", "probe_size=-1"], "Proposer option probe_size must be an integer >= 0, got -1."),
    ],
    ids=[
        "seeds",
        "dataset",
        "model proposer without a model",
        "max cost",
        "jobs",
        "seed option",
        "no key",
        "arm",
        "proposer option",
    ],
)
def test_bench_harness_option_errors_exit_2_with_one_line(tmp_path, args, message):
    out = run_metaharness("bench", "harness", "--out", tmp_path / "exp", *args, cwd=tmp_path, timeout=60)
    assert_fails_cleanly(out, message)
    assert not (tmp_path / "exp").exists()  # nothing written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--holdout", "-1"], "Invalid value for '--holdout'"),
        (["--evals-per-iter", "0"], "Invalid value for '--evals-per-iter'"),
        (["--val-limit", "0"], "Invalid value for '--val-limit'"),
    ],
    ids=["holdout", "evals per iteration", "val limit"],
)
def test_bench_harness_checks_the_run_options_as_optimize_does(tmp_path, args, message):
    for command in (["bench", "harness", "--out", tmp_path / "exp"], ["optimize", "--dataset", "uspto"]):
        assert_usage_error(run_metaharness(*command, *args, cwd=tmp_path, timeout=60), message)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_bench_harness_refuses_other_settings_for_a_stored_experiment_before_starting(tmp_path):
    exp = tmp_path / "exp"
    stored = experiment_spec(["symptom2disease"], ["offline", "offline-greedy"], [0, 1], iterations=2, val_limit=3)
    exp.mkdir()
    (exp / SPEC_FILE).write_text(json.dumps(stored.to_json()))
    out = run_metaharness("bench", "harness", "--out", exp, "--iters", "5", "--proposers", "offline", timeout=60)
    assert_fails_cleanly(out, "(proposers: ['offline', 'offline-greedy'] there, ['offline'] now).")
    assert out.stdout == "" and sorted(p.name for p in exp.iterdir()) == [SPEC_FILE]


@pytest.mark.slow
def test_bench_harness_runs_a_tiny_offline_grid_on_the_embedded_model_and_a_rerun_resumes(tmp_path, shared_data_dir):
    exp = tmp_path / "exp"
    grid = ["--datasets", "symptom2disease", "--proposers", "offline", "--evaluation", "planner,gate", "--seed", "0"]
    tiny = ["--iters", "1", "--evals-per-iter", "1", "--val-limit", "3", "--holdout", "1", "--no-test"]
    # The embedded model is slow: a small probe, and one cell at a time, so the second arm's seeds, proposals and
    # probes (the same as the first's: same seed) come from the response cache.
    tiny += ["-P", "probe_size=2", "--jobs", "1"]
    first = run_metaharness("bench", "harness", "--out", exp, *grid, *tiny, "--data-dir", shared_data_dir, timeout=1500)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "[2/2 done] finished" in first.stdout and (exp / "RESULTS.md").is_file()
    assert {r["status"] for r in lines(exp)} == {"done"} and len(lines(exp)) == 2
    for record in lines(exp):
        assert (exp / record["run_dir"] / "summary.jsonl").is_file()
    again = run_metaharness("bench", "harness", "--out", exp, "--data-dir", shared_data_dir)
    assert again.returncode == 0 and "All 2 runs were done already." in again.stdout, again.stderr[-2000:]
    assert len(lines(exp)) == 2
