"""Your own task through ``optimize()`` and ``metaharness optimize``: a task folder, a dataset saved with
``datasets`` (``hf:`` loading) and a Task object resolved as the run's task, with their own seeds or the standard
ones; where the task came from recorded in the run's settings, so a resume finds it again with the same carved val
split; a changed or moved task refused; clusters from the command line. The evaluator and proposer are the fakes
of tests/fakes.py (scores from the programs' ``# score=`` lines) over the real loop and store; the slow test at the
end runs ``metaharness init`` then ``metaharness optimize`` on the embedded model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from command_line import assert_fails_cleanly, run_metaharness
from fakes import FakeEvaluator, ScriptedModel, ScriptedProposer, ServedModel, ToyTask, program

from metaharness.budget import Budget
from metaharness.candidate import Evaluation
from metaharness.errors import InputError
from metaharness.models.replaying import ReplayingClient
from metaharness.models.stand_in import StandInClient
from metaharness.runner.optimize import optimize, run_config
from metaharness.runner.settings import RunSettings, SettingsChange
from metaharness.runner.task import seeds_of, task_source
from metaharness.store import RunDirectory
from metaharness.tasks import Task, open_task
from metaharness.tasks.custom.task import EXAMPLE

FAKE_MODEL = "openai:fake@http://127.0.0.1:9/v1"  # never called: the fake evaluator makes no model call
ROWS = [{"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"} for i in range(40)]
NUMERIC = '[data]\ninput = "question"\ntarget = "answer"\nval_size = 8\nsplit_seed = 5\n[metric]\nname = "numeric"\n'


class TaskRecorder(FakeEvaluator):
    """FakeEvaluator over the task ``optimize()`` opened (kept in ``OPENED`` with its val ids, one entry per
    session: the evaluators that replay programs on recorded calls or check them with stand-in models are not
    counted); a program without a ``# score=`` line (a standard seed) scores 0.2, on every example of its trace as
    the real evaluator records it."""

    def __init__(
        self, task: Task, model: Any, *, val_limit: int | None = None, workers: int | None = None, **_: Any
    ) -> None:
        super().__init__()
        self.task, self.val_limit = task, val_limit
        if not isinstance(model, (ReplayingClient, StandInClient)):
            OPENED.append((task, self.examples("val")))

    def examples(self, split: str) -> list[str]:
        return [e.id for e in self.task.load(split)][: self.val_limit]

    def evaluate(self, harness: Path, split: str, *, trace_path: Path, progress: Any = None, examples: Any = None):
        found = re.search(r"score=([0-9.]+)", harness.read_text())
        score = float(found.group(1)) if found else 0.2
        ids = list(examples) if examples is not None else self.examples(split)
        trace_path.write_text("".join(json.dumps({"id": i, "scores": {"primary": score}}) + "\n" for i in ids))
        if progress:
            progress(len(ids), len(ids))
        return Evaluation(split, {"primary": score}, {"context_tokens": 10.0}, len(ids), example_ids=ids,
                          example_scores=[score] * len(ids))  # fmt: skip


OPENED: list[tuple[Task, list[str]]] = []


@pytest.fixture(autouse=True)
def fakes(monkeypatch):
    """optimize() builds the fake evaluator and the scripted proposer instead of the real ones."""
    OPENED.clear()
    monkeypatch.setattr("metaharness.runner.optimize.TaskEvaluator", TaskRecorder)
    monkeypatch.setattr("metaharness.runner.optimize.get_proposer", lambda name, **config: ScriptedProposer())


def folder_task(root: Path, *, seeds: dict[str, float] | None = None, toml: str = NUMERIC) -> Path:
    """A task folder with a train split only (val is carved) and a test split, and ``seeds`` as candidates/."""
    folder = root / "arith"
    (folder / "data").mkdir(parents=True)
    (folder / "task.toml").write_text(toml, encoding="utf-8")
    for split, rows in (("train", ROWS), ("test", [{"question": "What is 50 + 1?", "answer": "#### 51"}])):
        (folder / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if seeds:
        (folder / "candidates").mkdir()
        for name, score in seeds.items():
            (folder / "candidates" / f"{name}.py").write_text(program(score))
    return folder


def seed_summaries(run_dir: Path) -> list[str]:
    return sorted(c.summary for c in RunDirectory.browse(run_dir).candidates() if c.iteration == 0)


def stored(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "settings.json").read_text())


# ---------------------------------------------------------------- a task folder


def test_a_folder_task_runs_from_its_own_seeds_and_a_resume_finds_it_with_the_same_carved_val(tmp_path):
    folder = folder_task(tmp_path, seeds={"alpha": 0.3, "beta": 0.5})
    run_dir = tmp_path / "run"
    outcome = optimize(run_dir, run_config(str(folder), task_model=FAKE_MODEL), iterations=1, test=False)
    assert outcome.best is not None and outcome.best.score == pytest.approx(0.6)
    assert seed_summaries(run_dir) == ["seed: alpha", "seed: beta"]
    first, val = OPENED[0]
    assert first.name == "arith" and len(val) == 8 and len(first.load("train")) == 32
    source = stored(run_dir)["task_source"]
    assert source["source"] == str(folder.resolve()) and len(source["fingerprint"]) == 64
    assert source["settings"] == {"data.split_seed": 5, "data.val_size": 8}  # the carve, recorded
    assert stored(run_dir)["dataset"] == "arith"

    again = optimize(run_dir, iterations=2, test=False)  # the run's directory is all a resume needs
    assert again.iterations_done == 2
    reopened, val_again = OPENED[1]
    assert reopened is not first and val_again == val
    assert [e.input for e in reopened.load("val")] == [e.input for e in first.load("val")]


def test_a_folder_without_seeds_starts_from_the_standard_ones(tmp_path):
    folder = folder_task(tmp_path)
    optimize(tmp_path / "run", run_config(str(folder), task_model=FAKE_MODEL), iterations=0, test=False)
    assert seed_summaries(tmp_path / "run") == ["seed: few_shot", "seed: retrieval", "seed: zero_shot"]
    sources = {s.name: s.source for s in seeds_of(open_task(str(folder)))}
    assert "DESCRIPTION = ''" in sources["zero_shot"] and list(sources) == ["few_shot", "retrieval", "zero_shot"]


def test_a_resume_refuses_a_task_whose_data_changed_or_moved(tmp_path):
    folder = folder_task(tmp_path, seeds={"alpha": 0.3})
    run_dir = tmp_path / "run"
    optimize(run_dir, run_config(str(folder), task_model=FAKE_MODEL), iterations=0, test=False)
    train = folder / "data" / "train.jsonl"
    train.write_text(train.read_text().replace("What is 3 + 3?", "What is 3 + 4?"))
    with pytest.raises(InputError, match="The train or val examples of the task .* changed since the run started"):
        optimize(run_dir, iterations=1)
    folder.rename(tmp_path / "elsewhere")
    with pytest.raises(InputError, match=f"This run's task folder {folder.resolve()} is missing: restore it there"):
        optimize(run_dir, iterations=1)
    assert len(OPENED) == 1  # neither session started


def test_other_task_settings_on_a_rerun_are_refused_with_both_named(tmp_path):
    folder = folder_task(tmp_path, seeds={"alpha": 0.3})
    run_dir = tmp_path / "run"
    optimize(run_dir, run_config(str(folder), task_model=FAKE_MODEL), iterations=0, test=False)
    other = run_config(str(folder), task_settings={"data.split_seed": 6}, task_model=FAKE_MODEL)
    message = (
        f"This run was started on the task {folder.resolve()} with the task settings -T data.split_seed=5 "
        "-T data.val_size=8, not -T data.split_seed=6 -T data.val_size=8"
    )
    with pytest.raises(InputError, match=re.escape(message)):
        optimize(run_dir, other, iterations=1)
    namesake = folder_task(tmp_path / "other", seeds={"alpha": 0.3})  # another folder of the same name
    changed = f"started on the task {folder.resolve()}, not the task {namesake.resolve()}; a run keeps its task"
    with pytest.raises(InputError, match=changed):
        optimize(run_dir, run_config(str(namesake), task_model=FAKE_MODEL), iterations=1)
    same = run_config(str(folder), task_settings={"data.split_seed": 5}, task_model=FAKE_MODEL)  # as the file says
    assert optimize(run_dir, same, iterations=1, test=False).iterations_done == 1


# ---------------------------------------------------------------- a dataset saved with the datasets library


def saved(tmp_path: Path, kind: str) -> Path:
    """Train and test, no val: written by ``save_to_disk``, or as JSONL files read through ``load_dataset``."""
    import datasets

    path = tmp_path / "saved"
    splits = {"train": ROWS, "test": [{"question": "What is 50 + 1?", "answer": "#### 51"}]}
    if kind == "save_to_disk":
        datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(path))
    else:
        path.mkdir()
        for split, rows in splits.items():
            (path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("kind", ["save_to_disk", "local files"])
def test_a_saved_dataset_without_val_runs_through_hf_loading_and_resumes_with_the_same_carve(
    tmp_path, monkeypatch, kind
):
    path = saved(tmp_path, kind)
    monkeypatch.chdir(tmp_path)
    settings = {"metric.name": "numeric", "data.val_size": 6, "data.split_seed": 3}
    config = run_config("hf:saved", task_settings=settings, task_model=FAKE_MODEL)
    optimize(tmp_path / "run", config, iterations=0, test=False, seed_files=[write_seed(tmp_path, "only", 0.4)])
    first, val = OPENED[0]
    assert len(val) == 6 and len(first.load("train")) == 34 and len(first.load("test")) == 1
    source = stored(tmp_path / "run")["task_source"]
    assert source["source"] == f"hf:{path}" and source["settings"] == settings  # absolute: a resume elsewhere finds it
    monkeypatch.chdir(tmp_path.parent)
    optimize(tmp_path / "run", iterations=1, test=False)
    assert OPENED[1][1] == val and [e.input for e in OPENED[1][0].load("val")] == [e.input for e in first.load("val")]
    other = open_task(f"hf:{path}", settings={**settings, "data.split_seed": 4})
    assert [e.id for e in other.load("val")] != val or [e.input for e in other.load("val")] != [
        e.input for e in first.load("val")
    ]


# ---------------------------------------------------------------- a Task object and seed files from Python


def write_seed(folder: Path, name: str, score: float) -> Path:
    path = folder / "seeds" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(program(score))
    return path


def test_a_task_object_and_seed_files_from_python_are_recorded_and_the_object_passed_again(tmp_path):
    seeds = [write_seed(tmp_path, "low", 0.1), write_seed(tmp_path, "high", 0.7)]
    run_dir = tmp_path / "run"
    outcome = optimize(run_dir, task=ToyTask(), seed_files=seeds, iterations=1, test=False, per_run=Budget(usd=1.0))
    assert outcome.best is not None and outcome.best.score == pytest.approx(0.8)
    assert seed_summaries(run_dir) == ["seed: high", "seed: low"] and OPENED[0][1] == [
        "val-0000",
        "val-0001",
        "val-0002",
    ]
    settings = stored(run_dir)
    assert settings["dataset"] == "toy-diagnosis" and settings["seed_files"] == [str(p.resolve()) for p in seeds]
    assert settings["task_source"]["source"] == "python:fakes.ToyTask"
    assert settings["task_model"] == "local:smollm2-135m"  # the defaults, as run_config(task) fills them in
    with pytest.raises(InputError, match=r"This run's task is a Python object \(fakes.ToyTask\): pass it again"):
        optimize(run_dir, iterations=2)
    seeds[0].unlink()  # the seeds are committed: a resume no longer reads their files
    assert optimize(run_dir, task=ToyTask(), iterations=2, test=False).iterations_done == 2
    with pytest.raises(InputError, match="The settings are for the task toy-diagnosis, not the task given"):
        optimize(run_dir, RunSettings.from_json(settings), task=open_task(str(EXAMPLE)), iterations=2)


def test_seed_files_are_checked_before_the_run_starts(tmp_path):
    seed = write_seed(tmp_path, "one", 0.3)
    with pytest.raises(InputError, match="No seed harness file .*missing.py: pass .py files that define class"):
        optimize(tmp_path / "run", task=ToyTask(), seed_files=[seed, tmp_path / "missing.py"], iterations=0)
    with pytest.raises(InputError, match="Two seed files are named one: give each seed file its own name."):
        seeds_of(ToyTask(), files=[seed, seed])
    with pytest.raises(InputError, match="Unknown seed.s. two: the seed files are one."):
        seeds_of(ToyTask(), ["two"], files=[seed])
    assert not (tmp_path / "run").exists()


def test_the_recorded_source_of_each_kind_of_task(tmp_path):
    assert task_source(open_task("symptom2disease")) is None  # the paper's datasets: the name says it
    example = task_source(open_task(str(EXAMPLE)))
    assert example is not None and example["source"] == str(EXAMPLE) and example["settings"] == {}
    toy = task_source(ToyTask())
    assert toy is not None and set(toy) == {"source", "fingerprint"}
    assert (
        run_config("symptom2disease").task_source is None and run_config("Symptom2Disease").dataset == "symptom2disease"
    )
    with pytest.raises(InputError, match="This run was started on a paper dataset, not the task /x; a run keeps"):
        RunSettings.resolve(SettingsChange(task_source={"source": "/x", "settings": {}}), run_config("uspto"))
    with pytest.raises(InputError, match="task_settings apply to a task folder or hf: dataset named by text"):
        run_config(ToyTask(), task_settings={"metric.name": "exact"})
    with pytest.raises(InputError, match="-T settings apply to a task folder or an hf: dataset"):
        run_config("uspto", task_settings={"metric.name": "exact"})


# ---------------------------------------------------------------- the command line


def test_optimize_takes_a_task_folder_and_refuses_misplaced_task_options(tmp_path):
    folder = folder_task(tmp_path, seeds={"alpha": 0.3})
    assert_fails_cleanly(
        run_metaharness("optimize", cwd=tmp_path, task_setting=["metric=exact"], resume=True),
        "-T sets up the task given with --dataset: add --dataset",
    )
    assert_fails_cleanly(
        run_metaharness("optimize", "--dataset", folder, "-T", "metrc=exact", cwd=tmp_path),
        "Unknown key 'metrc' in the task settings",
    )
    assert_fails_cleanly(
        run_metaharness("optimize", cwd=tmp_path, dataset=folder, data_dir=tmp_path),
        "--data-dir is for the paper's datasets; the task",
    )
    assert_fails_cleanly(
        run_metaharness("optimize", cwd=tmp_path, dataset=folder, dask_scheduler="tcp://a:1", ray_address="auto"),
        "--dask-scheduler and --ray-address each name a cluster: give one of them.",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arith"]  # no run directory was started


def test_a_rerun_with_other_task_settings_is_refused_before_anything_runs(tmp_path):
    folder = folder_task(tmp_path, seeds={"alpha": 0.3})
    run_dir = tmp_path / "run"
    optimize(run_dir, run_config(str(folder), task_model=FAKE_MODEL), iterations=0, test=False)
    refused = run_metaharness("optimize", "-T", "split_seed=9", cwd=tmp_path, dataset="arith", run_dir=run_dir)
    assert_fails_cleanly(refused, "with the task settings -T data.split_seed=5 -T data.val_size=8, not -T")


CONSTANT = """
class Harness:
    def __init__(self, lm, train):
        pass

    def predict(self, x):
        return "0"
"""


def test_optimize_starts_from_seed_files_given_on_the_command_line(tmp_path):
    folder = folder_task(tmp_path)
    (tmp_path / "mine.py").write_text(CONSTANT)
    assert_fails_cleanly(
        run_metaharness("optimize", cwd=tmp_path, dataset=folder, seed_harnesses="mine.py,zero_shot"),
        "--seed-harnesses takes the names of the task's seeds or .py files, not both.",
    )
    args: dict[str, Any] = {"dataset": folder, "iters": 0, "val_limit": 2, "task_model": FAKE_MODEL, "run_dir": "run"}
    done = run_metaharness("optimize", "--no-test", cwd=tmp_path, seed_harnesses="mine.py", **args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert seed_summaries(tmp_path / "run") == ["seed: mine"]  # a constant answer: no model call
    assert stored(tmp_path / "run")["seed_files"] == [str(tmp_path / "mine.py")]
    assert "note: the val split has 8 examples: too few to rank candidates" in done.stdout
    assert "aim for 100 or more" in done.stdout  # as docs/own-task.md advises
    # the old name of the flag still works and says so; a resume with nothing left to run says so
    again = run_metaharness("optimize", "--no-test", "--resume", cwd=tmp_path, seeds="mine.py", iters=0, run_dir="run")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "note: --seeds is deprecated; it is --seed-harnesses" in again.stdout
    assert "has finished 0 iterations and --iters 0 asks for no more, so no iteration runs" in again.stdout
    assert seed_summaries(tmp_path / "run") == ["seed: mine"]


def test_the_ray_flag_says_how_to_install_ray_when_it_is_missing(tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Ray is installed here")
    folder = folder_task(tmp_path, seeds={"alpha": 0.3})
    out = run_metaharness("optimize", cwd=tmp_path, dataset=folder, ray_address="auto", task_model=FAKE_MODEL)
    assert_fails_cleanly(out, "--ray-address needs Ray here and on every node: pip install 'metaharness[ray]'.")


def test_optimize_evaluates_on_a_dask_cluster_from_the_command_line(tmp_path):
    """A LocalCluster's scheduler address on the command line: the seeds' examples run as its tasks, the task
    model (served here) is reached through the parent, and the run ends as a local one would."""
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the dev and cluster extras")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    served = ServedModel(ScriptedModel("positive"), name="fake")
    try:
        before = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)
        assert run_metaharness("init", "mytask", cwd=tmp_path).returncode == 0
        out = run_metaharness(
            "optimize",
            "--no-test",
            cwd=tmp_path,
            dataset="mytask",
            iters=0,
            val_limit=3,
            holdout=0,  # the seeds' examples only (held-out ones would confirm the seeds)
            task_model=f"openai:fake@{served.base_url}",
            dask_scheduler=cluster.scheduler_address,
            run_dir="run",
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        after = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)
        assert after - before >= 9  # three seeds on three examples, each a task on the cluster
        assert len(served.model.requests) == 9
        scores = sorted(c.score for c in RunDirectory.browse(tmp_path / "run").candidates())
        assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
    finally:
        served.close()
        client.close()
        cluster.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_init_then_optimize_runs_on_the_embedded_defaults(tmp_path):
    """The two commands of the README, on the embedded model and the offline proposer (small: one iteration, four
    validation examples)."""
    made = run_metaharness("init", "mytask", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    run = run_metaharness("optimize", "--dataset", "mytask", cwd=tmp_path, iters=1, val_limit=4, timeout=1700)
    assert run.returncode == 0, run.stderr[-3000:]
    run_dir = tmp_path / "runs" / "review-sentiment-offline"
    log = [json.loads(line) for line in (run_dir / "summary.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log if r["type"] == "iteration"] == [0, 1]
    assert stored(run_dir)["task_source"]["source"] == str((tmp_path / "mytask").resolve())
    assert "review-sentiment" in run.stdout and "(best)" in run.stdout
