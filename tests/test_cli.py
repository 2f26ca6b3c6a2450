"""The command line as a user runs it: version, help, usage errors, and each command's run and clean failures.

``history``, ``show``, ``diff`` and ``report`` are in test_history_cli.py, ``plan solve`` in test_planner_cli.py,
a ``plan serve`` MCP session in test_planner_tool.py and a whole ``optimize`` run in test_loop_e2e.py (slow).
"""

from __future__ import annotations

from command_line import run_metaharness

import metaharness


def test_version():
    out = run_metaharness("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"metaharness {metaharness.__version__}"
    assert metaharness.__version__ != "0+unknown"


def test_help_lists_usage():
    out = run_metaharness("--help")
    assert out.returncode == 0
    assert "Usage" in out.stdout


def test_unknown_command_is_a_usage_error():
    out = run_metaharness("no-such-command")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------- eval


def test_eval_rejects_an_unknown_dataset_and_seed():
    for args in (["zero_shot", "--dataset", "mmlu"], ["no_such_seed", "--dataset", "uspto"]):
        out = run_metaharness("eval", *args)
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr


# ---------------------------------------------------------------- bench


def test_bench_sokoban_with_oracle_subagents_and_a_missing_model(tmp_path):
    out = tmp_path / "tape.jsonl"
    run = run_metaharness("bench", "sokoban", agent="tape", oracle_subagents=True, episodes=1, bins="easy", out=out)
    assert run.returncode == 0, run.stderr
    assert "success" in run.stdout and len(out.read_text().splitlines()) == 1
    missing = run_metaharness("bench", "sokoban", agent="react")
    assert missing.returncode == 2 and "--model" in missing.stderr and "Traceback" not in missing.stderr
