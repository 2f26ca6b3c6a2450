"""Coding-agent CLIs as the proposer's engine: the real CLIs' event formats, sessions of a stand-in CLI on PATH
(tests/standins/agent_cli.py) in the agent sandbox, spend, failures, and the coding and tps proposers driving it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fakes import seed_candidate

from metaharness.budget import Budget
from metaharness.errors import ConfigurationError, InputError
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ChatRequest, StructuredOutputError, Usage
from metaharness.proposers import check_proposer_model, get_proposer
from metaharness.proposers.coding import CodingProposer, ProposerEngineFailed
from metaharness.proposers.engines import ENGINES, EngineClient, engine_of
from metaharness.search.protocol import RunState
from metaharness.tasks import Task, open_task
from metaharness.tasks.custom.task import EXAMPLE

sys.path.insert(0, str(Path(__file__).parent / "standins"))
from agent_cli import COST, install  # noqa: E402

# What Claude Code 2.1.197 printed here with no key (`claude -p "say hi" --output-format stream-json --verbose`),
# trimmed to the fields the engine reads; the sample session of Codex's docs/exec.md (`codex exec --json`).
RECORDED = Path(__file__).parent / "data" / "engines"
CLAUDE_NOT_LOGGED_IN = [json.loads(line) for line in (RECORDED / "claude-not-logged-in.jsonl").read_text().splitlines()]
CODEX_SAMPLE = [json.loads(line) for line in (RECORDED / "codex-exec-sample.jsonl").read_text().splitlines()]


def test_the_real_clis_formats_parse():
    claude = ENGINES["claude-code"].parse(CLAUDE_NOT_LOGGED_IN)
    assert claude.error == "success: Not logged in · Please run /login" and claude.dollars == 0.0
    assert claude.messages == [{"role": "assistant", "content": "Not logged in · Please run /login"}]
    codex = ENGINES["codex"].parse(CODEX_SAMPLE)
    assert codex.error is None and codex.text == "Yep, there is a README.md."
    assert (codex.usage.input_tokens, codex.usage.cached_tokens, codex.usage.output_tokens) == (24763, 24448, 122)
    call, result = codex.messages[1], codex.messages[2]
    assert call["tool_calls"] == [{"id": "item_1", "name": "shell", "arguments": {"command": "bash -lc ls"}}]
    assert result == {"role": "tool", "tool_call_id": "item_1", "content": "AGENTS.md\nREADME.md\n\n[exit code 0]"}
    assert ENGINES["codex"].parse(CODEX_SAMPLE[:2]).error == "the session ended without completing its turn"


def test_engine_specs():
    assert engine_of("claude-code") == (ENGINES["claude-code"], None)
    assert engine_of("codex:gpt-5-codex") == (ENGINES["codex"], "gpt-5-codex")
    assert engine_of("anthropic:claude-sonnet-4-5") is None and engine_of(None) is None
    with pytest.raises(InputError, match="not a coding-agent engine"):
        EngineClient("cursor")


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """``claude`` and ``codex`` stand-ins first on PATH; no real key in the environment."""
    folder = tmp_path / "bin"
    for program in ("claude", "codex"):
        install(folder, program)
    monkeypatch.setenv("PATH", f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin")
    for key in (
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CODEX_API_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return folder


def test_check_says_what_to_install_or_set(standins, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(
        ConfigurationError,
        match="needs the `claude` command on PATH: install it with npm install -g @anthropic-ai/claude-code",
    ):
        EngineClient("claude-code").check()
    monkeypatch.setenv("PATH", f"{standins}:/usr/bin:/bin")
    with pytest.raises(ConfigurationError, match="claude-code is not logged in"):
        EngineClient("claude-code").check()
    with pytest.raises(ConfigurationError, match="codex is not logged in .* set CODEX_API_KEY or OPENAI_API_KEY"):
        check_proposer_model("tps", "codex")
    with pytest.raises(InputError, match="coding-agent engine for the coding and tps proposers, not for offline"):
        check_proposer_model("offline", "claude-code")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "standin:ok")
    EngineClient("claude-code").check()


def example_state(iteration: int = 1, proposals: int = 1) -> tuple[RunState, Task]:
    from metaharness.runner.task import seed_sources

    task = open_task(str(EXAMPLE))
    seeds = seed_sources(task)
    cost = {"input_tokens": 900.0, "output_tokens": 30.0}
    candidates = [
        seed_candidate(f"c00{i + 1}", name, source, 0.2 * (i + 1), cost)
        for i, (name, source) in enumerate(seeds.items())
    ]
    return RunState(task=task.name, iteration=iteration, candidates=candidates, proposals=proposals), task


@pytest.mark.parametrize("engine", ["claude-code", "codex:gpt-4.1"])
def test_a_session_writes_candidates_in_the_sandbox_and_is_recorded_and_charged(
    standins, monkeypatch, tmp_path, engine
):
    monkeypatch.setenv("ANTHROPIC_API_KEY" if engine == "claude-code" else "CODEX_API_KEY", "standin:ok")
    monkeypatch.setenv("OPENAI_API_KEY" if engine == "claude-code" else "ANTHROPIC_API_KEY", "sk-not-for-this-engine")
    monkeypatch.setenv("METAHARNESS_SECRET", "do-not-leak")
    state, task = example_state(proposals=2)
    ledger = Ledger()
    proposer = get_proposer("coding", task=task, model=EngineClient(engine, ledger=ledger), run_dir=tmp_path / "run")
    proposals = proposer.propose(state)
    assert [p.summary for p in proposals] == ["stand-in revision cand1", "stand-in revision cand2"]
    assert all(p.parent == "c003" and p.source.endswith("revised by the stand-in agent\n") for p in proposals)
    folder = tmp_path / "run" / "proposer" / "iter-1"
    events = [json.loads(line) for line in (folder / "transcript.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == ("result" if engine == "claude-code" else "turn.completed")
    messages = json.loads((folder / "transcript.json").read_text())
    assert [m["role"] for m in messages[:2]] == ["system", "user"] and "Write 2 new candidate(s)" in messages[1][
        "content"
    ]
    assert any("refused: Permission denied" in str(m.get("content")) for m in messages)  # the sandbox held
    assert not (folder / "outside.txt").exists()
    assert messages[-1]["content"].startswith("Submitted:\nnew/cand1 passed the import check")
    (session,) = [json.loads(line) for line in (folder / "scratch" / "standin-sessions.jsonl").read_text().splitlines()]
    own_key = "ANTHROPIC_API_KEY" if engine == "claude-code" else "CODEX_API_KEY"
    shell = {"PWD", "OLDPWD", "SHLVL", "_"}  # what the stand-in's /bin/sh wrapper adds
    seen = set(session["env"]) - shell
    assert seen == {"PATH", "HOME", "TMPDIR", own_key} | ({"LANG", "LC_ALL", "TZ"} & seen)  # no other secret
    totals = ledger.totals()["by_model"][engine]
    assert (totals["input_tokens"], totals["output_tokens"]) == (
        (1500, 300) if engine == "claude-code" else (1200, 300)
    )
    if engine == "claude-code":
        assert totals["dollars"] == COST and "--max-turns" in session["argv"]
    else:  # priced as openai:gpt-4.1 from the price table
        price = ledger.prices.lookup("openai:gpt-4.1")
        assert price is not None and totals["dollars"] == pytest.approx(price.dollars(Usage(1200, 300, 200)), abs=1e-6)


def test_the_dollar_cap_left_is_the_sessions_budget_flag(standins, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "standin:ok")
    state, task = example_state()
    state.money_left = Budget(usd=0.75)
    proposer = get_proposer("coding", task=task, model="claude-code:sonnet", run_dir=tmp_path)
    proposer.propose(state)
    (session,) = [
        json.loads(line)
        for line in (tmp_path / "proposer" / "iter-1" / "scratch" / "standin-sessions.jsonl").read_text().splitlines()
    ]
    argv = session["argv"]
    assert argv[argv.index("--max-budget-usd") + 1] == "0.7500" and argv[argv.index("--model") + 1] == "sonnet"


def test_a_failing_import_gets_one_repair_session(standins, monkeypatch, tmp_path):
    monkeypatch.setenv("CODEX_API_KEY", "standin:broken")
    state, task = example_state()
    proposer = get_proposer("coding", task=task, model="codex", run_dir=tmp_path)
    (proposal,) = proposer.propose(state)
    assert "no_such_module" not in proposal.source  # the second session rewrote it
    sessions = (tmp_path / "proposer" / "iter-1" / "scratch" / "standin-sessions.jsonl").read_text().splitlines()
    assert len(sessions) == 2
    messages = json.loads((tmp_path / "proposer" / "iter-1" / "transcript.json").read_text())
    assert any(
        "failed their import check" in str(m.get("content")) and "no_such_module_anywhere" in str(m.get("content"))
        for m in messages
    )


def test_a_failed_session_fails_the_iteration_with_the_clis_words(standins, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "standin:fail")
    state, task = example_state()
    proposer = get_proposer("coding", task=task, model="claude-code", run_dir=tmp_path)
    with pytest.raises(
        ProposerEngineFailed, match="claude-code wrote no candidate: success: API Error: 529 overloaded"
    ):
        proposer.propose(state)
    assert (tmp_path / "proposer" / "iter-1" / "transcript.json").is_file()


def test_a_session_past_its_wall_time_is_killed(standins, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "standin:slow")
    state, task = example_state()
    proposer = get_proposer("coding", task=task, model="claude-code", run_dir=tmp_path, agent_seconds=8)
    with pytest.raises(ProposerEngineFailed, match="stopped at the wall-time limit of 8 s"):
        proposer.propose(state)
    events = (tmp_path / "proposer" / "iter-1" / "transcript.jsonl").read_text().splitlines()
    assert json.loads(events[0])["subtype"] == "init"  # what the session printed before it was killed is kept


@pytest.mark.parametrize("engine", ["claude-code", "codex"])
def test_json_answers_for_the_planning_stages(standins, monkeypatch, engine):
    monkeypatch.setenv("ANTHROPIC_API_KEY" if engine == "claude-code" else "CODEX_API_KEY", "standin:ok")
    client = EngineClient(engine)
    schema = {
        "type": "object",
        "properties": {"correct": {"type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "boolean"}}},
        "required": ["correct"],
    }
    request = ChatRequest(
        [{"role": "system", "content": "Predict."}, {"role": "user", "content": "Go."}], json_schema=schema
    )
    result = client.complete(request, role="subagent")
    assert result.parsed == {"correct": [True, True, True]} and result.model == engine
    assert client.ledger.totals()["by_role"]["subagent"]["calls"] == 1
    with pytest.raises(StructuredOutputError, match="does not fit the schema"):
        client.complete(
            ChatRequest([{"role": "user", "content": "x"}], json_schema={"type": "string", "pattern": "^no$"})
        )


def test_tps_plans_with_the_engine_then_the_engines_agent_writes_the_chosen_plan(standins, monkeypatch, tmp_path):
    from fakes import ScriptedModel

    monkeypatch.setenv("ANTHROPIC_API_KEY", "standin:ok")
    state, task = example_state()
    proposer = get_proposer(
        "tps",
        task=task,
        task_model=ScriptedModel("positive"),
        model="claude-code",
        run_dir=tmp_path,
        probe_size=3,
        plans=2,
    )
    (proposal,) = proposer.propose(state)
    planning = json.loads((tmp_path / "proposer" / "iter-1" / "planning.json").read_text())
    assert "fallback" not in planning and planning["selection"]["evaluate"] == [proposal.node]
    assert proposal.prediction is not None
    assert proposal.parent == "c003" and proposal.prediction.extra["chain"] == [
        "add two worked examples from the training split to the prompt"
    ]
    assert proposal.source.endswith("# plan1: revised by the stand-in agent\n")
    sessions = [
        json.loads(line)["argv"]
        for line in (tmp_path / "proposer" / "iter-1" / "scratch" / "standin-sessions.jsonl").read_text().splitlines()
    ]
    assert len(sessions) == 1 and "--append-system-prompt" in sessions[0]  # the agent session; answers ran elsewhere
    assert isinstance(proposer, CodingProposer) and isinstance(proposer.model, EngineClient)
    assert proposer.model.ledger.totals()["by_role"]["subagent"]["calls"] >= 2  # sampling and simulation


def test_optimize_with_the_base_proposer_on_an_engine_commits_its_edits_and_keeps_its_transcript(
    standins, monkeypatch, tmp_path
):
    """``metaharness optimize --proposer coding --proposer-model claude-code`` as ``optimize()`` runs it: the engine is
    checked before the run starts, its session's edits become committed candidates of iteration 1, and its
    transcript is in the run directory. The evaluator is the fake of tests/fakes.py (no task model is called)."""
    import shutil

    from fakes import FakeEvaluator, program

    from metaharness.runner.optimize import optimize, run_config
    from metaharness.store import RunDirectory

    monkeypatch.setattr("metaharness.runner.optimize.TaskEvaluator", lambda task, model, **kw: FakeEvaluator())
    folder = tmp_path / "task"
    shutil.copytree(EXAMPLE, folder)
    (folder / "candidates").mkdir(exist_ok=True)
    (folder / "candidates" / "seed.py").write_text(program(0.3))  # what the fake evaluator scores
    settings = run_config(
        str(folder),
        task_model="openai:fake@http://127.0.0.1:9/v1",
        proposer="coding",
        proposer_model="claude-code",
        proposals=2,
        evaluation="greedy",
    )
    with pytest.raises(ConfigurationError, match="claude-code is not logged in"):
        optimize(tmp_path / "refused", settings, iterations=1, test=False)
    assert not (tmp_path / "refused").exists()  # refused before the run directory was made

    monkeypatch.setenv("ANTHROPIC_API_KEY", "standin:ok")
    run_dir = tmp_path / "run"
    outcome = optimize(run_dir, settings, iterations=1, test=False)
    assert outcome.iterations_done == 1
    made = [c for c in RunDirectory.browse(run_dir).candidates() if c.iteration == 1]
    assert [c.summary for c in made] == ["stand-in revision cand1", "stand-in revision cand2"]
    assert all(c.source.endswith("revised by the stand-in agent\n") and not c.failed for c in made)
    events = (run_dir / "proposer" / "iter-1" / "transcript.jsonl").read_text().splitlines()
    assert json.loads(events[-1])["type"] == "result"
