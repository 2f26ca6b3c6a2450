"""docs/own-task.md agrees with the code: every task-file key and built-in metric is documented, its task file and
Python metric are valid, every flag its commands use exists, and the page ``metaharness init`` points to is it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

from metaharness.tasks.custom.metrics import BUILTIN_METRICS
from metaharness.tasks.custom.spec import ANSWER_KEYS, DATA_KEYS, METRIC_KEYS, TOP_KEYS, check_settings, tomllib
from metaharness.tasks.custom.task import EXAMPLE

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "own-task.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks(language: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(PAGE.read_text()) if m.group(1) == language]


@cache
def help_text(command: str) -> str:
    argv = [sys.executable, "-m", "metaharness", command, "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_task_file_key_and_built_in_metric_is_documented():
    text = PAGE.read_text()
    for key in (*TOP_KEYS, *DATA_KEYS, *ANSWER_KEYS, *METRIC_KEYS, *BUILTIN_METRICS):
        assert f"`{key}`" in text or f"{key}`" in text or f"`[{key}]" in text, key


def test_the_task_file_and_the_python_metric_on_the_page_are_valid():
    (toml,) = blocks("toml")
    settings = check_settings(tomllib.loads(toml), "docs/own-task.md")
    assert settings["metric"]["name"] in BUILTIN_METRICS
    example = tomllib.loads((EXAMPLE / "task.toml").read_text())
    assert settings["data"] == example["data"] and settings["answer"] == example["answer"]  # the page shows init's
    namespace: dict = {}
    exec(blocks("python")[0], namespace)
    assert namespace["score"]("The answer is Paris", "paris", {}) == {"primary": 1.0, "length": 0.08}


def test_every_command_on_the_page_uses_flags_that_exist():
    commands = [line for block in blocks("bash") for line in block.splitlines() if line.startswith("metaharness ")]
    assert len(commands) >= 5
    for line in commands:
        words = shlex.split(line)
        usage = help_text(words[1])
        for flag in (w for w in words if w.startswith("--")):
            assert flag in usage, (line, flag)


def test_init_and_the_example_point_to_this_page():
    assert "docs/own-task.md" in (ROOT / "metaharness" / "cli" / "init_task.py").read_text()
    assert "docs/own-task.md" in (EXAMPLE / "task.toml").read_text() and PAGE.is_file()
    assert PAGE.read_text().startswith("# Your own task\n")
