"""Hostile and broken harnesses are contained: each scores 0 with a clear error and the evaluation completes.

The task model here is a scripted model and the task a small one held in memory (these tests check the sandbox and
the evaluator's failure handling, not a model or a dataset, so they never skip); every harness runs in the real
sandbox process. tests/test_hostile_harnesses.py attacks the sandbox itself.
"""

from __future__ import annotations

import os
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedModel, ToyTask

from metaharness.evaluation import HarnessInvalid, SandboxLimits, check_harness, evaluate
from metaharness.evaluation.confine import probe

SECRET = "sk-test-secret-0123456789"
DENGUE = "[DIAGNOSIS]dengue[/DIAGNOSIS]"


def write_harness(tmp_path: Path, body: str, name: str = "harness.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def predict_harness(tmp_path: Path, predict_body: str, imports: str = "") -> Path:
    """A harness whose ``predict(self, x)`` runs ``predict_body`` (``self.lm`` is the model)."""
    body = textwrap.indent(textwrap.dedent(predict_body).strip(), " " * 8)
    header = "class Harness:\n    def __init__(self, lm, train):\n        self.lm = lm\n\n    def predict(self, x):\n"
    return write_harness(tmp_path, f"{imports}\n{header}{body}\n")


def run(path: Path, *, limit: int = 3, limits: SandboxLimits | None = None, **kw):
    return evaluate(path, ToyTask(), "val", model=ScriptedModel(DENGUE), limit=limit, workers=3, limits=limits, **kw)


def assert_contained(report, pattern: str, failing: set[str]):
    """The examples in ``failing`` failed with an error matching the regular expression ``pattern``; the others
    succeeded."""
    assert len(report.records) == 3
    for record in report.records:
        if record.id in failing:
            assert record.error is not None and re.search(pattern, record.error), record.error
            assert record.scores["primary"] == 0.0
        else:
            assert record.error is None, record.error
    assert report.errors == len(failing)


def test_this_machine_holds_every_guarantee():
    machine: dict[str, Any] = probe()
    assert machine["missing"] == [], machine  # elsewhere evaluations refuse to start (see test_hostile_harnesses)
    assert "namespaces" in machine["layers"] and "seccomp" in machine["layers"]
    if machine["uid"] == 0:
        assert "a uid of its own" in machine["layers"]
        assert machine["whole_sandbox"] == ["memory", "pids", "cpu", "cpu share"]  # cgroup v1 here (docs/sandbox.md)


# Harnesses that misbehave on the first validation example (the one about a back): what they do (a statement in
# predict), what they import, the limits they run under, and what the error of that example must say.
MISBEHAVIOUR = [
    pytest.param(
        'raise ValueError("cannot handle backs")',
        "",
        None,
        r"ValueError: cannot handle backs \(harness.py line",  # the harness's line, for the proposer
        id="raises",
    ),
    pytest.param(
        "while True:\n    pass",
        "",
        SandboxLimits(cpu_seconds=2, wall_seconds=60),
        "CPU-time limit of 2s",
        id="loops forever",
    ),
    pytest.param(
        "time.sleep(3600)", "import time", SandboxLimits(wall_seconds=1.5), "wall-time limit of 1.5s", id="sleeps"
    ),
    pytest.param(
        "hoard = []\nwhile True:\n    hoard.append(bytearray(50_000_000))",
        "",
        SandboxLimits(memory_mb=600),
        "MemoryError",
        id="allocates too much memory",
    ),
    pytest.param("os._exit(3)", "import os", None, "exited with code 3", id="kills its process"),
    pytest.param(
        'socket.create_connection(("127.0.0.1", 9), timeout=2)',
        "import socket",
        None,
        "PermissionError",
        id="reaches for the network",
    ),
]


@pytest.mark.parametrize(("statement", "imports", "limits", "error"), MISBEHAVIOUR)
def test_misbehaviour_fails_only_that_example(tmp_path, statement, imports, limits, error):
    body = f'if "back" in x:\n{textwrap.indent(statement, "    ")}\nreturn self.lm(x)'
    report = run(predict_harness(tmp_path, body, imports), limits=limits)
    assert_contained(report, error, {"val-0000"})


class ModelClock:
    """The sandbox's clock: real time plus the model time passed so far, which the scripted model's latency moves on
    instead of sleeping. ``reads`` counts the looks at it (none: the sandbox keeps its time by another clock)."""

    def __init__(self) -> None:
        self.model_seconds = 0.0
        self.reads = 0

    def monotonic(self) -> float:
        self.reads += 1
        return time.monotonic() + self.model_seconds

    def advance(self, seconds: float) -> None:
        self.model_seconds += seconds


def test_model_time_does_not_count_against_the_wall_time(tmp_path, monkeypatch):
    """Two calls of a minute each per example under a 30 s wall-time limit: no sleep, and no race of the harness's
    own work against the limit."""
    clock = ModelClock()
    monkeypatch.setattr("metaharness.evaluation.sandbox.time", clock)
    path = predict_harness(
        tmp_path,
        """
        return self.lm(x) + self.lm(x)
    """,
    )
    report = evaluate(
        path,
        ToyTask(),
        "val",
        model=ScriptedModel(DENGUE, latency=60.0, sleep=clock.advance),
        limit=2,
        workers=1,  # one sandbox at a time: one example's model time is no other's harness time
        limits=SandboxLimits(wall_seconds=30.0),
    )
    assert report.errors == 0 and clock.model_seconds == 240.0 and clock.reads > 0


def test_harness_that_looks_for_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    path = predict_harness(
        tmp_path,
        """
        found = [v for k, v in os.environ.items() if "KEY" in k or "TOKEN" in k]
        for path in [f"/proc/{os.getppid()}/environ", "/proc/1/environ"] + glob.glob("/proc/*/environ"):
            try:
                found.append(open(path, "rb").read().decode("latin-1"))
            except OSError:
                pass
        if "back" in x:
            raise RuntimeError("no key found: " + repr(found)[:200])
        return repr(found)
    """,
        "import glob, os",
    )
    report = run(path)
    assert_contained(report, "RuntimeError: no key found", {"val-0000"})
    for record in report.records:
        assert SECRET not in (record.prediction or "") and SECRET not in (record.error or "")


def test_harness_that_writes_outside_its_folder(tmp_path):
    outside = tmp_path / "outside.txt"
    repo_file = Path(__file__).resolve().parent / "sandbox-escape.txt"
    path = predict_harness(
        tmp_path,
        f"""
        open("notes.txt", "w").write("the scratch folder is writable")
        if "back" in x:
            open({str(outside)!r}, "w").write("escaped")
        if "shivering" in x:
            open({str(repo_file)!r}, "w").write("escaped")
        return self.lm(x)
    """,
    )
    report = run(path)
    # Outside the scratch folder the sandbox's file system has nothing writable, and no tmp_path at all.
    assert_contained(report, "(PermissionError|FileNotFoundError|OSError: .*Read-only)", {"val-0000", "val-0001"})
    assert not outside.exists() and not repo_file.exists()


def test_harness_that_prints_garbage_and_returns_garbage(tmp_path):
    path = predict_harness(
        tmp_path,
        """
        print('{"type": "result", "prediction": "[DIAGNOSIS]dengue[/DIAGNOSIS]"}')
        sys.stdout.write("\\x00\\xff garbage\\n")
        if "back" in x:
            return 42
        return self.lm(x)
    """,
        "import sys",
    )
    report = run(path)
    assert_contained(report, "predict returned int, not str", {"val-0000"})
    assert report.records[1].scores["primary"] == 1.0  # val-0001 is dengue


def test_missing_import_fails_every_example_and_check_harness(tmp_path):
    path = predict_harness(tmp_path, 'return ""', "import no_such_module_anywhere")
    with pytest.raises(HarnessInvalid, match="No module named 'no_such_module_anywhere'"):
        check_harness(path, ToyTask())
    report = run(path)
    assert report.errors == 3 and report.scores["primary"] == 0.0
    assert all("failed to load" in r.error for r in report.records)


def test_check_harness_rejects_a_file_without_harness_class(tmp_path):
    path = write_harness(tmp_path, "class Model:\n    pass\n")
    with pytest.raises(HarnessInvalid, match="no class named Harness"):
        check_harness(path, ToyTask())


def test_sandbox_environment_holds_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET)
    path = predict_harness(tmp_path, 'return " ".join(sorted(os.environ))', "import os")
    report = run(path, limit=1)
    names = set(report.records[0].prediction.split())
    assert names <= {
        "PATH",
        "LANG",
        "LC_ALL",
        "TZ",
        "HOME",
        "TMPDIR",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "LC_CTYPE",
    }
    assert os.environ["MY_SERVICE_TOKEN"] == SECRET


def test_string_hashing_is_the_same_in_every_run(tmp_path):
    path = predict_harness(tmp_path, 'return str(hash("metaharness")) + " " + ",".join({"a", "b", "c", "d"})')
    first = run(path, limit=1).records[0].prediction
    assert first == run(path, limit=1).records[0].prediction
