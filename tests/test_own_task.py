"""Your own task: task files, splits read with ``datasets`` (files, save_to_disk, hub layout), the val carve, the
built-in metrics and a Python metric, the standard seeds, and every metric end to end through the evaluator."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from metaharness.errors import InputError, MetaharnessError
from metaharness.runner.task import seed_sources
from metaharness.tasks import CustomTask, Example, open_task, reopen_task, task_origin
from metaharness.tasks.custom.data import carve
from metaharness.tasks.custom.metrics import Answer, builtin_metric, chosen_option, last_number, normalize
from metaharness.tasks.custom.spec import flat_settings
from metaharness.tasks.custom.task import EXAMPLE


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def make_folder(folder: Path, toml: str, splits: dict[str, list[dict]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(toml, encoding="utf-8")
    for split, rows in splits.items():
        write_jsonl(folder / f"{split}.jsonl", rows)
    return folder


def score(metric: str, prediction: str, target: str, answer: Answer | None = None, **options) -> dict[str, float]:
    bound = builtin_metric(metric, options, answer or Answer.from_settings())
    return bound.score(prediction, Example("e", "x", target))


# ---------------------------------------------------------------- built-in metrics, by hand


def test_exact_and_normalized_exact():
    assert score("exact", " Paris \n", "Paris") == {"primary": 1.0}
    assert score("exact", "paris", "Paris") == {"primary": 0.0}
    assert normalize(" 'Paris'.\n") == "paris" and normalize("Ｐａｒｉｓ") == "paris"  # NFKC folds full-width
    assert score("normalized_exact", "'PARIS'.", "paris") == {"primary": 1.0}
    assert score("normalized_exact", "New   York!", "new york") == {"primary": 1.0}
    assert score("normalized_exact", "New Yorker", "new york") == {"primary": 0.0}


def test_regex_reads_the_answer_from_prediction_and_target():
    pattern = r"####\s*(.+)"
    assert score("regex", "so 3+4 is 7\n#### 7", "Janet has 3... #### 7", pattern=pattern) == {"primary": 1.0}
    assert score("regex", "the answer is 7", "#### 7", pattern=pattern) == {"primary": 0.0}  # no match: 0
    assert score("regex", "<a>Blue</a>", "blue", pattern="<a>(.*?)</a>") == {"primary": 1.0}  # target whole
    tagged = Answer.from_settings(pattern=r"<a>(.*?)</a>")
    assert score("regex", "x <a>Red</a>", "red", answer=tagged) == {"primary": 1.0}  # the convention's pattern
    with pytest.raises(InputError, match="needs a pattern"):
        score("regex", "x", "y")


def test_set_f1_and_jaccard():
    f1 = score("set_f1", "apple, Banana; cherry", "banana\napple\ndate")
    assert f1["exact"] == 0.0 and f1["precision"] == pytest.approx(2 / 3) and f1["recall"] == pytest.approx(2 / 3)
    assert f1["primary"] == pytest.approx(2 / 3) and list(f1) == ["primary", "precision", "recall", "exact"]
    assert score("jaccard", "a|b", "b|c|a", separator=r"\|") == {"primary": pytest.approx(2 / 3), "exact": 0.0}
    assert score("jaccard", "B, a", "a,b") == {"primary": 1.0, "exact": 1.0}
    assert score("set_f1", "", "a")["primary"] == 0.0


def test_numeric():
    assert last_number("It costs $1,234.50 in total.") == 1234.5 and last_number("no digits") is None
    assert score("numeric", "so the result is 42.0000001", "#### 42") == {"primary": 1.0}
    assert score("numeric", "about 41", "42") == {"primary": 0.0}
    assert score("numeric", "about 41", "42", rel_tol=0.05) == {"primary": 1.0}
    assert score("numeric", "3e-3", "0.003") == {"primary": 1.0}
    assert score("numeric", "I do not know", "7") == {"primary": 0.0}
    with pytest.raises(InputError, match="abs_tol must be a number >= 0"):
        score("numeric", "1", "1", abs_tol=-1)


@pytest.mark.parametrize(
    ("prediction", "chosen"),
    [
        ("B", "B"),
        ("(C)", "C"),
        ("The answer is D because A is wrong", "D"),
        ("A) is tempting but B) fits", "A"),
        ("A patient would say so", None),  # the article "A" is no choice
        ("", None),
    ],
)
def test_choice_letters(prediction, chosen):
    assert chosen_option(prediction, ("A", "B", "C", "D")) == chosen


def test_choice_labels_and_index_targets():
    labels = Answer.from_settings(choices=["positive", "negative"])
    assert score("choice", "I think it is Negative overall", "negative", answer=labels) == {"primary": 1.0}
    assert score("choice", "positive, not negative", "negative", answer=labels) == {"primary": 0.0}
    assert score("choice", "neutral", "negative", answer=labels) == {"primary": 0.0}
    with pytest.raises(InputError, match="Unknown metric 'bleu'"):
        builtin_metric("bleu", {}, labels)
    with pytest.raises(InputError, match="does not take separator"):
        builtin_metric("choice", {"separator": ","}, labels)


# ---------------------------------------------------------------- task folders


def test_the_example_task_opens_with_its_splits_and_seeds():
    task = open_task(str(EXAMPLE))
    assert isinstance(task, CustomTask) and task.name == "review-sentiment"
    assert [len(task.load(s)) for s in ("train", "val", "test")] == [60, 30, 30] and task.notes == []
    val = task.load("val")
    assert task.score("positive", val[0]) == {"primary": 1.0} and task.score("", val[0]) == {"primary": 0.0}
    seeds = seed_sources(task)
    assert list(seeds) == ["few_shot", "retrieval", "zero_shot"]
    assert "CHOICES: list[str] = ['positive', 'negative']" in seeds["zero_shot"] and "review" in seeds["few_shot"]
    for source in seeds.values():
        compile(source, "seed", "exec")


def test_formats_a_template_input_ids_and_class_labels(tmp_path):
    import datasets

    folder = tmp_path / "mc"
    folder.mkdir()
    (folder / "task.toml").write_text(
        'name = "mc"\n[data]\ninput = "{question}\\nA) {a}\\nB) {b}"\ntarget = "answer"\nid = "uid"\n'
        'val_size = 1\n[answer]\nchoices = ["A", "B"]\n[metric]\nname = "choice"\n'
    )
    rows: dict[str, list[Any]] = {
        "question": ["2+2?", "3+3?", "1+1?"],
        "a": ["4", "5", "2"],
        "b": ["5", "6", "3"],
        "uid": ["q1", "q2", "q3"],
    }
    rows["answer"] = [0, 1, 0]
    (folder / "data").mkdir()
    datasets.Dataset.from_dict(rows).to_csv(str(folder / "data" / "train.csv"))
    task = open_task(str(folder))
    examples = task.load("train") + task.load("val")
    assert sorted(e.id for e in examples) == ["q1", "q2", "q3"]
    q2 = next(e for e in examples if e.id == "q2")
    assert q2.input == "3+3?\nA) 5\nB) 6" and q2.target == "B"  # an index into answer.choices
    assert task.score("The answer is (B)", q2) == {"primary": 1.0}


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[data]\ninput = "text"\ntarget = "gold"\n[metric]\nnam = "exact"\n', "Unknown key 'nam' in [metric]"),
        ('[data]\ninput = "nope"\ntarget = "gold"\n', "has no column 'nope'"),
        ('[data]\ninput = "text"\n', "Name the target column with data.target (e.g. -T target=text)"),
        ('[data]\ninput = "text"\ntarget = "gold"\n[metric]\nname = "f2"\n', "Unknown metric 'f2'"),
        ('[data]\ninput = "text"\ntarget = "gold"\ntrain = "missing.jsonl"\n', "no such file"),
        ("[data\n", "is not valid TOML"),
        ('[data]\ninput = "text"\ntarget = "gold"\nval_size = 9\n', "Cannot carve 9 val examples"),
    ],
)
def test_bad_task_files_are_refused_with_one_line(tmp_path, toml, message):
    folder = make_folder(tmp_path / "t", toml, {"train": [{"text": f"t{i}", "gold": "x"} for i in range(4)]})
    with pytest.raises(MetaharnessError, match=re.escape(message)):
        open_task(str(folder))


def test_unknown_references_and_misplaced_options(tmp_path):
    with pytest.raises(InputError, match="Unknown task 'mmlu'"):
        open_task("mmlu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="folder without task.toml"):
        open_task(str(tmp_path / "empty"))
    with pytest.raises(InputError, match="-T settings apply to a task folder"):
        open_task("uspto", settings={"data.input": "x"})
    with pytest.raises(InputError, match="--data-dir is for the paper's datasets"):
        open_task(str(EXAMPLE), data_dir=tmp_path)
    with pytest.raises(InputError, match="-T takes KEY=VALUE"):
        flat_settings(["config"])


def test_settings_override_the_task_file_and_a_small_val_split_or_test_leak_is_noted(tmp_path):
    rows = [{"text": f"item {i}", "gold": "x"} for i in range(12)]
    folder = make_folder(
        tmp_path / "t",
        '[data]\ninput = "text"\ntarget = "gold"\n[metric]\nname = "exact"\n',
        {"train": rows[:8], "val": rows[8:11], "test": rows[10:]},
    )
    task = open_task(str(folder), settings=flat_settings(["metric=normalized_exact", "name=renamed"]))
    assert isinstance(task, CustomTask)
    assert task.name == "renamed" and task.metric.name == "normalized_exact"
    notes = " | ".join(task.notes)
    assert "the val split has 3 examples: too few to rank candidates" in notes
    assert "1 test example(s) also appear in train or val (first: test-0000)" in notes


# ---------------------------------------------------------------- datasets saved with the datasets library


def saved_dataset(tmp_path: Path) -> Path:
    """A DatasetDict with train and test only (no val), written by save_to_disk, as a hub dataset would load."""
    import datasets

    train = datasets.Dataset.from_dict(
        {"question": [f"What is {i} + {i}?" for i in range(40)], "answer": [f"#### {2 * i}" for i in range(40)]}
    )
    test = datasets.Dataset.from_dict({"question": ["What is 100 + 1?"], "answer": ["#### 101"]})
    path = tmp_path / "arith"
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(path))
    return path


def test_a_saved_dataset_without_val_gets_a_carved_val_split_that_a_resume_finds_again(tmp_path):
    path = saved_dataset(tmp_path)
    settings = flat_settings(["metric=numeric", "data.val_size=10", "data.split_seed=7"])
    task = open_task(f"hf:{path}", settings=settings)
    assert isinstance(task, CustomTask) and task.name == "arith"
    train, val, test = (task.load(s) for s in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (30, 10, 1)
    assert not {e.input for e in train} & {e.input for e in val}  # carved out, not copied
    assert task.score("so it is 202", test[0]) == {"primary": 0.0}
    assert task.score("2 + 2 ... #### 101", test[0]) == {"primary": 1.0}
    origin = task_origin(task)
    assert origin is not None
    assert origin["settings"] == {"metric.name": "numeric", "data.val_size": 10, "data.split_seed": 7}
    again = reopen_task(json.loads(json.dumps(origin)))  # as run.json stores it
    assert [e.input for e in again.load("val")] == [e.input for e in val]
    other = open_task(f"hf:{path}", settings={**settings, "data.split_seed": 8})
    assert [e.input for e in other.load("val")] != [e.input for e in val]
    assert any("val carved from train: 10 examples, split_seed 7" in note for note in task.notes)


def test_a_hub_layout_folder_loads_through_load_dataset_and_a_changed_task_is_refused_on_resume(tmp_path):
    import datasets

    hub = tmp_path / "owner-name"
    (hub / "data").mkdir(parents=True)
    frame: dict[str, list[Any]] = {"sentence": ["good", "bad", "fine", "awful", "great"], "label": [1, 0, 1, 0, 1]}
    features = datasets.Features(
        {"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
    )
    datasets.Dataset.from_dict(frame, features=features).to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    datasets.Dataset.from_dict(frame, features=features).to_parquet(
        str(hub / "data" / "validation-00000-of-00001.parquet")
    )
    task = open_task(f"hf:{hub}", settings={"data.input": "sentence"})
    assert isinstance(task, CustomTask)
    assert [e.target for e in task.load("val")][:2] == ["pos", "neg"] and "val carved" not in " ".join(task.notes)
    origin = task_origin(task)
    assert origin is not None
    frame["sentence"][0] = "very good"
    datasets.Dataset.from_dict(frame, features=features).to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    with pytest.raises(InputError, match="changed since the run started"):
        reopen_task(origin)


def test_a_missing_dataset_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MetaharnessError, match="Loading the dataset no-such-owner/no-such-set with the datasets"):
        open_task("hf:no-such-owner/no-such-set")


def test_the_carve_is_a_stable_function_of_the_seed():
    rows = list(range(50))
    rest, val = carve(rows, 10, seed=0)
    assert (len(rest), len(val)) == (40, 10) and val == sorted(val) and set(rest) | set(val) == set(rows)
    assert carve(rows, 10, seed=0) == (rest, val) and carve(rows, 10, seed=1)[1] != val
    assert val == [7, 15, 18, 20, 25, 33, 36, 44, 45, 46]  # sha256 order: the same on every machine


# ---------------------------------------------------------------- a Python metric


METRIC = """
def score(prediction, target, row):
    if prediction == "boom":
        raise ValueError("cannot parse")
    if prediction == "too much":
        return 1.5
    words = set(prediction.lower().split())
    return {"primary": float(target in words), "length": min(1.0, len(words) / 10), "weight": row["weight"]}
"""


def python_metric_task(tmp_path: Path, source: str = METRIC) -> CustomTask:
    rows = [{"text": f"q{i}", "gold": f"w{i}", "weight": 0.5} for i in range(6)]
    folder = make_folder(
        tmp_path / "py",
        'description = "d"\n[data]\ninput = "text"\ntarget = "gold"\n[metric]\nfile = "metric.py"\n',
        {"train": rows[:3], "val": rows[3:]},
    )
    (folder / "metric.py").write_text(source, encoding="utf-8")
    task = open_task(str(folder))
    assert isinstance(task, CustomTask)
    return task


def test_a_python_metric_is_held_to_the_score_contract(tmp_path, capsys):
    task = python_metric_task(tmp_path)
    example = task.load("val")[0]
    assert task.metric_names() == ["primary", "length", "weight"]
    assert task.score("the answer is w3", example) == {"primary": 1.0, "length": 0.4, "weight": 0.5}
    assert task.score("boom", example) == {"primary": 0.0, "length": 0.0, "weight": 0.0}  # a bad answer scores 0
    assert "score() raised ValueError: cannot parse for example val-0000" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"returned primary=1.5 for example val-0000: a score must be a number in"):
        task.score("too much", example)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def score(p, t):\n    return {'f1': 1.0}\n", "returned a dict without 'primary'"),
        ("def score(p, t):\n    return float('nan')\n", "returned primary=nan"),
        ("def score(p, t):\n    raise KeyError('x')\n", "raised KeyError: 'x' when scoring example val-0000's own"),
        ("def scorer(p, t):\n    return 1\n", "defines no function score()"),
        ("import no_such_module\n", "Importing the metric file"),
    ],
)
def test_a_broken_python_metric_is_refused_when_the_task_opens(tmp_path, source, message):
    with pytest.raises(InputError, match=message):
        python_metric_task(tmp_path, source)


# ---------------------------------------------------------------- end to end through the evaluator


# A harness that answers from a table written into it (no model call), so each metric's score is known exactly.
ANSWERING = """
ANSWERS = {answers!r}


class Harness:
    def __init__(self, lm, train):
        self.seen = len(train)

    def predict(self, x):
        return ANSWERS[x]
"""

CASES = {
    # metric settings: (answer settings, [(target, prediction)], expected mean primary)
    "exact": ("", [("Paris", "Paris"), ("Rome", "rome")], 0.5),
    "normalized_exact": ("", [("Paris", " paris."), ("Rome", "Milan")], 0.5),
    'regex"\npattern = "####\\\\s*(\\\\S+)': ("", [("#### 12", "so #### 12"), ("#### 3", "3")], 0.5),
    "set_f1": ("", [("a, b", "b, a"), ("a, b", "a, c")], 0.75),
    "jaccard": ("", [("a, b", "b, a"), ("a, b", "a, c")], (1 + 1 / 3) / 2),
    "numeric": ("", [("#### 1,234", "It is 1234."), ("5", "6")], 0.5),
    "choice": ('choices = ["yes", "no"]', [("yes", "Yes, surely"), ("no", "yes")], 0.5),
}


@pytest.mark.parametrize("metric", list(CASES), ids=lambda name: name.split('"')[0])
def test_each_built_in_metric_end_to_end_in_a_folder_task(tmp_path, metric):
    from metaharness.evaluation import evaluate

    answer, pairs, expected = CASES[metric]
    rows = [{"q": f"question {i}", "a": target} for i, (target, _) in enumerate(pairs)]
    folder = make_folder(
        tmp_path / "task",
        f'[data]\ninput = "q"\ntarget = "a"\n[answer]\n{answer}\n[metric]\nname = "{metric}"\n',
        {"train": rows, "val": rows},
    )
    answers = {row["q"]: prediction for row, (_, prediction) in zip(rows, pairs, strict=True)}
    harness = tmp_path / "harness.py"
    harness.write_text(ANSWERING.format(answers=answers), encoding="utf-8")
    report = evaluate(harness, open_task(str(folder)), "val", model="local:smollm2-135m", workers=1)
    assert report.errors == 0 and report.scores["primary"] == pytest.approx(expected)
    assert [r.prediction for r in report.records] == [p for _, p in pairs]


def test_a_python_metric_end_to_end_in_a_folder_task(tmp_path):
    from metaharness.evaluation import evaluate

    task = python_metric_task(tmp_path)
    answers = {"q3": "w3 is it", "q4": "boom", "q5": "nothing"}
    harness = tmp_path / "harness.py"
    harness.write_text(ANSWERING.format(answers=answers), encoding="utf-8")
    report = evaluate(harness, task, "val", model="local:smollm2-135m", workers=1)
    assert [r.scores["primary"] for r in report.records] == [1.0, 0.0, 0.0]
    assert report.scores == {
        "primary": pytest.approx(1 / 3),
        "length": pytest.approx(0.3 / 3 + 0.1 / 3),
        "weight": 1 / 3,
    }


# ---------------------------------------------------------------- the command line: init, eval


def test_init_writes_a_task_folder_that_eval_scores_and_refuses_a_used_folder(tmp_path):
    from command_line import assert_fails_cleanly, run_metaharness

    made = run_metaharness("init", "mytask", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "wrote the task review-sentiment to mytask" in made.stdout
    assert "metaharness optimize --dataset mytask --iters 2" in made.stdout
    assert sorted(p.name for p in (tmp_path / "mytask").iterdir()) == ["README.md", "data", "task.toml"]
    assert "--dataset mytask --iters 2" in (tmp_path / "mytask" / "task.toml").read_text()
    scored = run_metaharness("eval", "zero_shot", "--dataset", "mytask", cwd=tmp_path, limit=2, out="out")
    assert scored.returncode == 0, scored.stderr
    assert "primary (metric choice)" in scored.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["task"] == "review-sentiment" and summary["examples"] == 2 and summary["errors"] == 0
    assert "CHOICES: list[str] = ['positive', 'negative']" in (tmp_path / "out" / "harness.py").read_text()
    assert_fails_cleanly(run_metaharness("init", "mytask", cwd=tmp_path), "mytask already exists and is not empty")
    assert_fails_cleanly(
        run_metaharness("eval", "nine_shot", "--dataset", "mytask", cwd=tmp_path),
        "Unknown seed(s) nine_shot for review-sentiment: choose from few_shot, retrieval, zero_shot.",
    )
