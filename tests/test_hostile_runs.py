"""The hostile battery at the scale of a run: a parent that dies, a second Ctrl-C, a full disk, a model freed too
early, bad data files, plan graphs too large for the machine, a start that failed. None may hang, escape, lose
spend or end in a traceback; none needs a dataset (the task folder shipped in tasks/custom/example, the toy task
and the loop driver's fakes serve). ``python benchmarks/hostile_harnesses.py`` prints what each attempt met.

The disk tests mount a tmpfs, so they need root (what CI runs as here); elsewhere they say so and skip."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from command_line import error_lines, run_metaharness
from disk_driver import evaluations, small_disk, stop_and_resume
from fakes import ScriptedModel, ToyTask
from loop_driver import CONFIG
from test_hostile_harnesses import current_test, processes_named

from metaharness.errors import BudgetExceeded, StorageFailure
from metaharness.evaluation import evaluate
from metaharness.evaluation.confine import isolation
from metaharness.models.client import Client
from metaharness.models.protocol import ChatRequest, ChatResult, Role
from metaharness.runner.ledger import run_ledger
from metaharness.store import RunDirectory
from metaharness.store.files import free_bytes

TESTS = Path(__file__).resolve().parent
EXAMPLE_TASK = TESTS.parent / "tasks" / "custom" / "example"
# What each test's attempts met: {test: {attempt: outcome}} (benchmarks/hostile_harnesses.py prints it).
OBSERVED: dict[str, dict[str, str]] = {}
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


def observed(attempt: str, outcome: str) -> None:
    test = current_test()
    OBSERVED.setdefault(test, {})[attempt] = " ".join(outcome.split())[:300]


def named_harness(folder: Path, name: str, body: str) -> Path:
    """A harness whose ``predict`` names its process ``name`` (so the test can find it from outside) and runs
    ``body``."""
    path = folder / "hostile.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import ctypes, time

            class Harness:
                def __init__(self, lm, train):
                    self.lm = lm

                def predict(self, x):
                    ctypes.CDLL(None).prctl(15, {name!r}.encode(), 0, 0, 0)
            """
        )
        + textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
        + "\n"
    )
    return path


def wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def assert_none_left(name: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while processes_named(name):
        assert time.monotonic() < deadline, f"sandbox processes named {name} outlived their parent"
        time.sleep(0.1)


# ---------------------------------------------------------------- a sandbox dies with its parent


EVALUATING = """
import sys
sys.path.insert(0, {tests!r})
from fakes import ScriptedModel, ToyTask
from metaharness.evaluation import SandboxLimits, evaluate
evaluate({harness!r}, ToyTask(), "val", model=ScriptedModel("x"), limit=2, workers=2,
         limits=SandboxLimits(cpu_seconds=600, wall_seconds=600))
"""


def scratch_folders(pids: list[int]) -> set[str]:
    """The host scratch folders of the sandbox processes ``pids`` (their ``TMPDIR``, see ``clean_environment``)."""
    folders = set()
    for pid in pids:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            env = dict(entry.split(b"=", 1) for entry in handle.read().split(b"\0") if b"=" in entry)
        folders.add(os.fsdecode(env[b"TMPDIR"]))
    return folders


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV], ids=lambda s: s.name)
def test_a_sandbox_dies_with_its_parent_however_the_parent_dies(tmp_path, how):
    """No process is left, and with namespaces no scratch folder either: the parent never gets to close them."""
    name = f"mh{uuid.uuid4().hex[:12]}"
    harness = named_harness(tmp_path, name, "while True:\n    pass")
    parent = subprocess.Popen([sys.executable, "-c", EVALUATING.format(tests=str(TESTS), harness=str(harness))])
    try:
        wait_for(lambda: len(processes_named(name)) == 2)  # both examples spinning, each in its sandbox
        scratch = scratch_folders(processes_named(name))
        parent.send_signal(how)
        parent.wait(timeout=30)
        assert_none_left(name)
        observed(f"2 spinning sandboxes, parent killed by {how.name}", "no sandbox process left")
    finally:
        parent.kill()
    assert len(scratch) == 2 and all(os.path.basename(f).startswith("metaharness-sandbox-") for f in scratch)
    if isolation().namespaces:  # without them the folder holds what the harness wrote: only close removes it
        assert not [folder for folder in scratch if os.path.lexists(folder)]


# ---------------------------------------------------------------- Ctrl-C


def test_a_second_ctrl_c_stops_the_run_at_once_and_leaves_no_sandbox(tmp_path):
    name = f"mh{uuid.uuid4().hex[:12]}"
    harness = named_harness(tmp_path, name, "time.sleep(3600)")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    argv = [sys.executable, "-m", "metaharness", "optimize", "--dataset", str(EXAMPLE_TASK), "--seeds", str(harness)]
    argv += ["--iters", "0", "--val-limit", "2", "--no-test", "--run-dir", str(tmp_path / "run")]
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(processes_named(name)) >= 1, 120)  # a sandbox of the seed hangs (check or evaluation)
        run.send_signal(signal.SIGINT)
        time.sleep(1)
        assert run.poll() is None  # the first Ctrl-C lets the stage under way finish
        pressed = time.monotonic()
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=30)
        seconds = time.monotonic() - pressed
        assert_none_left(name)
    finally:
        run.kill()
    observed(
        "a hanging seed, Ctrl-C twice", f"exit code {run.returncode} {seconds:.1f}s after the second, no sandbox left"
    )
    assert run.returncode in (1, 130) and "Traceback" not in stderr, stderr
    assert seconds < 10


# ---------------------------------------------------------------- spend, disks and models freed at exit


def test_an_evaluation_returns_only_once_no_call_is_in_flight(tmp_path):
    """A systemic failure in one example (a reached cap) while another is inside a model call: the evaluation
    raises only after that call returned, so nothing frees the model under it."""
    finished = threading.Event()

    class SlowThenCapped(ScriptedModel):
        def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
            if "back" in str(request.messages):
                time.sleep(2)
                finished.set()
                return super().complete(request, role=role)
            time.sleep(0.5)
            raise BudgetExceeded("Token cap reached")

    harness = tmp_path / "harness.py"
    harness.write_text(
        "class Harness:\n    def __init__(self, lm, train):\n        self.lm = lm\n\n"
        "    def predict(self, x):\n        return self.lm(x)\n"
    )
    with pytest.raises(BudgetExceeded):
        evaluate(harness, ToyTask(), "val", model=SlowThenCapped("x"), limit=2, workers=2)
    observed("a cap reached while another call runs", f"the call in flight had returned: {finished.is_set()}")
    assert finished.is_set()


@root_only
def test_a_spend_line_the_full_disk_refuses_stops_the_run_and_is_kept(tmp_path):
    with small_disk(tmp_path / "disk", 4) as disk:
        run = RunDirectory.open(disk / "run", CONFIG)
        try:
            costs = run_ledger(run)
            backend = ScriptedModel("[DIAGNOSIS]dengue[/DIAGNOSIS]")
            client = Client("openai:fake-task", backend, cache=None, ledger=costs.ledger)
            harness = tmp_path / "harness.py"
            harness.write_text(
                "class Harness:\n    def __init__(self, lm, train):\n        self.lm = lm\n\n"
                "    def predict(self, x):\n        return self.lm(x)\n"
            )
            filler = disk / "filler"
            with open(filler, "wb") as handle:  # the disk is full from here on
                while free_bytes(disk):
                    try:
                        handle.write(b"f" * (1 << 16))
                        handle.flush()
                    except OSError:
                        break
            with pytest.raises(StorageFailure) as stopped:
                evaluate(harness, ToyTask(), "val", model=client, limit=1, workers=1)
            message = str(stopped.value)
            observed("the disk full when a call's spend is journaled", message)
            assert "journaled in spend.jsonl with the space kept in reserve" in message and "\n" not in message
            assert len(backend.requests) == 1 and run.spent()["calls"] == 1  # the call made is on record
        finally:
            run.close()


# Free space a run on the 30 MiB disk starts with (KiB): a few levels here, every one in benchmarks/low_disk.py.
# Without the floor (0): git init (328), the journal (352), summary.jsonl (404) and later writes meet the full disk.
LEVELS = [(0, None), (1600, None), (2100, None), (328, 0), (352, 0), (404, 0), (600, 0), (900, 0)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, dict[str, float]]:
    """What the loop driver's run scores on a disk with room to spare."""
    return stop_and_resume(tmp_path_factory.mktemp("reference"), 1 << 40).scores()


@root_only
@pytest.mark.parametrize(("kib", "min_free"), LEVELS, ids=[f"{k} KiB free, floor {m}" for k, m in LEVELS])
def test_a_run_on_a_small_disk_stops_cleanly_and_resumes_with_nothing_lost(tmp_path, reference, kib, min_free):
    result = stop_and_resume(tmp_path, kib << 10, min_free)
    code, stderr = result.first
    observed(f"{kib} KiB free (floor {'1 MiB' if min_free is None else min_free})", f"exit {code}: {stderr}")
    assert result.problems(reference) == []


# ---------------------------------------------------------------- inputs


def write_task(folder: Path, **files: bytes) -> Path:
    """A copy of the example task folder with some of its data files replaced."""
    subprocess.run(["cp", "-a", str(EXAMPLE_TASK), str(folder)], check=True)
    for name, data in files.items():
        (folder / "data" / f"{name}.jsonl").write_bytes(data)
    return folder


def assert_one_line(run: subprocess.CompletedProcess, *parts: str, code: int = 2) -> str:
    lines = error_lines(run)
    assert run.returncode == code and len(lines) == 1 and lines[0].startswith("error: "), run.stderr[-3000:]
    assert all(part in lines[0] for part in parts), lines[0]
    observed(" ".join(run.args[3:6]), lines[0])
    return lines[0]


BAD_DATA = [
    ({"train": b'{"review": "caf\\u00e9 \xff", "label": "positive"}\n'}, ("train.jsonl is not UTF-8", "byte 0xff")),
    ({"val": b""}, ("val.jsonl is empty", "the val split needs at least one example")),
    ({"val": b"\n\n"}, ("val.jsonl is empty",)),
]


@pytest.mark.parametrize(("files", "parts"), BAD_DATA, ids=["a byte that is no UTF-8", "an empty split", "blank"])
def test_a_bad_data_file_is_refused_in_one_line_naming_it(tmp_path, files, parts):
    task = write_task(tmp_path / "task", **files)
    harness = TESTS.parent / "candidates" / "standard" / "zero_shot.py"
    assert_one_line(run_metaharness("eval", harness, dataset=task, limit=1, timeout=300), *parts, code=1)


def chain(nodes: int, horizon: int | None) -> dict[str, object]:
    edges = [{"id": f"e{i}", "source": f"n{i}", "target": f"n{i + 1}", "cost": [1]} for i in range(nodes - 1)]
    graph: dict[str, object] = {
        "start": "n0",
        "budget": [nodes],
        "nodes": [{"id": f"n{i}"} for i in range(nodes - 1)] + [{"id": f"n{nodes - 1}", "reward": 1, "goal": True}],
        "edges": edges,
    }
    if horizon is not None:
        graph["horizon"] = horizon
    return graph


PLAN_GRAPHS = [
    (lambda: json.dumps(chain(40_000, 40_000)), "too large to solve here: 40,000 nodes and a horizon of 40,000"),
    (lambda: json.dumps(chain(3, 10**30)), "too large to solve here: 3 nodes and a horizon of"),
    (lambda: json.dumps({**chain(3, None), "budget": [10**15]}), "the walks its budget allows, up to"),
    (lambda: "[" * 100_000 + "]" * 100_000, "nests JSON arrays or objects too deeply"),
]


@pytest.mark.parametrize(
    ("text", "message"), PLAN_GRAPHS, ids=["a long chain", "a huge horizon", "a huge budget", "deep nesting"]
)
def test_plan_solve_refuses_what_the_machine_cannot_hold_in_one_line(tmp_path, text, message):
    path = tmp_path / "graph.json"
    path.write_text(text())
    assert_one_line(run_metaharness("plan", "solve", path, timeout=300), message)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"task_model": "openai:gpt-4.1-mini"}, "needs an OpenAI API key"),
        ({"task_model": "local:no-such-model"}, "Unknown local model"),
        ({"task_model": "openai:mystery", "max_cost": 1, "env": {"OPENAI_API_KEY": "sk-no"}}, "no price for"),
    ],
    ids=["a hosted model without its key", "an unknown local model", "a dollar cap on a model without a price"],
)
def test_a_model_that_cannot_run_is_refused_before_the_run_directory_exists(tmp_path, options, message):
    run = tmp_path / "run"
    assert_one_line(run_metaharness("optimize", dataset=EXAMPLE_TASK, iters=0, run_dir=run, **options), message)
    assert not run.exists()


def test_a_folder_left_by_an_interrupted_start_is_reused(tmp_path):
    run = tmp_path / "run"
    RunDirectory.open(run, {**CONFIG, "task_model": "openai:gone"}).close()  # made, then the start stopped
    assert not RunDirectory.started(run)
    reopened = RunDirectory.open(run, CONFIG)  # another model this time: the folder holds nothing of a run yet
    reopened.close()
    assert RunDirectory.browse(run).store.config()["task_model"] == CONFIG["task_model"]
    observed("a run directory whose start stopped before the run began", "reused by the next start")
    assert evaluations(run) == {}


# ---------------------------------------------------------------- text a harness controls

# What a harness's error may hold (as Python source): a lone surrogate, rich markup that fails to parse, plants a
# hyperlink or hides text, a colour escape sequence.
HOSTILE_ERROR = r"boom \ud800 [/bogus] [link=https://evil.example]click[/link] [conceal]hidden[/conceal] \x1b[31mred"
# rich's own colours are on (as in a terminal), so a link or a concealed span would show as its escape sequence.
COLOUR = {"FORCE_COLOR": "1"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # rich's own colours, left out of what the report prints


def raising_harness(folder: Path, where: str) -> Path:
    """A harness whose ``__init__`` (``where="init"``) or ``predict`` raises ``ValueError(HOSTILE_ERROR)``."""
    path = folder / f"hostile_{where}.py"
    init, predict = ("raise ValueError(ERROR)", "return x") if where == "init" else ("pass", "raise ValueError(ERROR)")
    path.write_text(
        f"ERROR = '{HOSTILE_ERROR}'\n\n\nclass Harness:\n    def __init__(self, lm, train):\n        {init}\n\n"
        f"    def predict(self, x):\n        {predict}\n"
    )
    return path


def assert_shown_inert(output: str, shown: int | None = None) -> None:
    """The harness's text is on screen as written (its first ``shown`` characters, where the screen cuts it), and
    none of it acted: no link, no concealed span, no colour of its own."""
    written = "boom \\ud800 [/bogus] [link=https://evil.example]click[/link] [conceal]hidden[/conceal] \\x1b[31mred"
    assert written[:shown] in output, output[-3000:]
    assert "\x1b]8;" not in output and "\x1b[8m" not in output and "\x1b[31mred" not in output
    assert "Traceback" not in output


@pytest.mark.parametrize("where", ["init", "predict"])
def test_eval_of_a_harness_whose_error_holds_markup_and_a_lone_surrogate_writes_its_records(tmp_path, where):
    out = tmp_path / "out"
    run = run_metaharness(
        "eval", raising_harness(tmp_path, where), dataset=EXAMPLE_TASK, limit=2, out=out, env=COLOUR, timeout=300
    )
    shown = next((line for line in run.stdout.splitlines() if "example(s) failed" in line), "")
    observed(f"eval, the error raised in {where}", f"exit {run.returncode}: {ANSI.sub('', shown)}")
    assert run.returncode == 0, run.stderr[-3000:]
    assert_shown_inert(run.stdout)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    raised = HOSTILE_ERROR.encode().decode("unicode_escape")  # the text itself, its escapes read
    assert len(records) == 2 and all(raised in r["error"] for r in records)
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["errors"] == 2


@pytest.mark.slow
def test_a_run_whose_seed_fails_to_load_with_hostile_text_finishes_and_resumes(tmp_path):
    """The issue's case: a seed's load error held a lone surrogate and markup, and optimize then every --resume
    exited 1 writing the journal. Both must exit 0, with the error kept verbatim."""
    seeds = f"{TESTS.parent / 'candidates' / 'standard' / 'zero_shot.py'},{raising_harness(tmp_path, 'init')}"
    run_dir = tmp_path / "run"
    first = run_metaharness(
        "optimize",
        dataset=EXAMPLE_TASK,
        seed_harnesses=seeds,
        iters=0,
        val_limit=2,
        no_test=True,
        proposals=2,
        run_dir=run_dir,
        env=COLOUR,
    )
    observed("optimize, a seed's load error of hostile text", f"exit {first.returncode}")
    assert first.returncode == 0, (first.stdout[-3000:], first.stderr[-3000:])
    assert_shown_inert(first.stdout, shown=20)  # the progress line keeps 160 characters, most of them a path
    resumed = run_metaharness("optimize", run_dir=run_dir, resume=True, iters=1, env=COLOUR)
    observed("--resume of that run, one more iteration", f"exit {resumed.returncode}")
    assert resumed.returncode == 0, (resumed.stdout[-3000:], resumed.stderr[-3000:])
    failed = RunDirectory.browse(run_dir).store.get("c002").candidate
    assert failed.failed and "boom \ud800 [/bogus]" in (failed.error or "")
    summary = (run_dir / "SUMMARY.md").read_text(encoding="utf-8")
    assert "| c002 | 0 | root | failed |" in summary and "[/bogus]" not in summary  # (tests/test_hostile_text.py)
