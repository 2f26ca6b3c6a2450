"""The coding proposers (``coding``, ``tps``) through real model clients.

- Anthropic: the real ``anthropic`` SDK against a mock HTTP transport answering with Messages API responses of the
  recorded shape (``tool_use`` blocks, usage fields); the proposer's tools run for real (workspace files, sandboxed
  import check, probes through the evaluator).
- The local OpenAI-compatible server (llama-cpp-python with the embedded SmolLM2-135M) as proposer model: it
  writes poor code or none; the proposer must return without crashing and the loop must record and go on.
"""

from __future__ import annotations

import json

import pytest
from command_line import optimize
from fakes import MessagesAPI
from test_proposers_offline import _state, keyword_model

from metaharness.errors import ConfigurationError
from metaharness.models import RetryPolicy, connect
from metaharness.proposers import get_proposer
from metaharness.tasks import get_task

MODEL = "claude-sonnet-4-6"


def tool_use(name: str, arguments: dict, n: int) -> dict:
    """A Messages API response whose content is one ``tool_use`` block (the recorded shape)."""
    return {
        "id": f"msg_01{n:022d}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            {"type": "text", "text": "Next step."},
            {"type": "tool_use", "id": f"toolu_01{n:022d}", "name": name, "input": arguments},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 1800,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 1500,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 60,
            "service_tier": "standard",
        },
    }


def tool_results(api: MessagesAPI) -> list[str]:
    """What the proposer's tools answered, as the model saw it in later requests."""
    return [
        block["content"]
        for body in api.requests
        for message in body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


@pytest.fixture
def anthropic(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)

    def make(calls):
        api = MessagesAPI(*(tool_use(name, arguments, i) for i, (name, arguments) in enumerate(calls)))
        return api.client(MODEL, retry=RetryPolicy(max_attempts=1)), api

    return make


@pytest.fixture
def task(shared_data_dir):
    return get_task("symptom2disease", data_dir=shared_data_dir)


def test_base_writes_checks_and_reports_a_failed_import(anthropic, task, tmp_path) -> None:
    client, api = anthropic(
        [
            ("read_file", {"path": "summary.md"}),
            ("copy_candidate", {"candidate_id": "c1", "name": "k4"}),
            ("edit_file", {"path": "new/k4/harness.py", "old": "K = 8", "new": "K = 4"}),
            ("submit", {"name": "k4", "parent": "c1", "summary": "retrieve 4 examples", "hypothesis": "less noise"}),
            ("write_file", {"path": "new/broken/harness.py", "content": "class Harness:\n    pass\n"}),
            ("write_file", {"path": "../escape.py", "content": "x"}),
            ("submit", {"name": "broken", "parent": "c0", "summary": "an empty harness"}),
            ("finish", {}),
        ]
    )
    proposer = get_proposer("coding", model=client, task=task, run_dir=tmp_path)
    proposals = proposer.propose(_state(evals=2))
    assert [p.parent for p in proposals] == ["c1", "c0"]
    assert "K = 4" in proposals[0].source and proposals[0].summary == "retrieve 4 examples"
    assert proposals[1].source == "class Harness:\n    pass\n"  # failed the import check: the loop records it
    results = tool_results(api)
    assert "# Run summary" in results[0] and "FAILED: boom" in results[0]  # the failed attempt is shown
    assert any("passed the import check" in r for r in results)
    assert any("outside the workspace" in r for r in results)
    assert any("import check FAILED" in r for r in results)
    assert api.requests[0]["tool_choice"] == {"type": "any"}
    assert {t["name"] for t in api.requests[0]["tools"]} >= {"read_file", "grep", "submit", "run_on_train"}
    assert (tmp_path / "proposer" / "iter-1" / "transcript.json").is_file()
    assert not (tmp_path / "proposer" / "iter-1" / "escape.py").exists()


def test_tps_plans_predicts_selects_then_implements(anthropic, task, tmp_path) -> None:
    client, api = anthropic(
        [
            (
                "respond",
                {
                    "plans": [
                        {"start": "c1", "revisions": ["retrieve 4 examples instead of 8"]},
                        {"start": "c0", "revisions": ["ask for the label only"]},
                    ]
                },
            ),
            (
                "respond",
                {
                    "correct": [True, True, False],
                    "implementation_tokens": 300,
                    "context_tokens": 700,
                    "breaks_harness": False,
                },
            ),
            (
                "respond",
                {
                    "correct": [False, False, False],
                    "implementation_tokens": 200,
                    "context_tokens": 200,
                    "breaks_harness": True,
                },
            ),
            ("copy_candidate", {"candidate_id": "c1", "name": "plan1"}),
            ("edit_file", {"path": "new/plan1/harness.py", "old": "K = 8", "new": "K = 4"}),
            ("submit", {"name": "plan1", "parent": "c1", "summary": "retrieve 4 examples"}),
        ]
    )
    proposer = get_proposer("tps", model=client, task=task, task_model=keyword_model(), run_dir=tmp_path, probe_size=3)
    state = _state(evals=1)
    proposals = proposer.propose(state)
    assert len(proposals) == 1
    p = proposals[0]
    assert p.parent == "c1" and "K = 4" in p.source and p.node == "p1.0" and p.prediction is not None
    extra, cost = p.prediction.extra, p.prediction.cost
    assert extra["chain"] == ["retrieve 4 examples instead of 8"] and extra["selection"] == "exact"
    assert extra["label"] in (0, 1) and cost is not None and cost["tokens"] >= 0
    planning = json.loads((tmp_path / "proposer" / "iter-1" / "planning.json").read_text())
    assert planning["added"] == ["p1.0", "p1.1"] and planning["selection"]["evaluate"] == ["p1.0"]
    assert state.graph is not None and state.graph.node("p1.1").dead_end  # the dead end stays in the graph
    brief = api.requests[3]["messages"][0]["content"]
    assert "new/plan1: copy candidate c1, then implement: retrieve 4 examples instead of 8" in str(brief)


def test_coding_proposers_need_a_model(task) -> None:
    with pytest.raises(ConfigurationError, match="proposer-model"):
        get_proposer("tps", task=task, task_model=keyword_model())


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_local_server_proposers_and_the_loop_go_on(local_openai_server, shared_data_dir, tmp_path) -> None:
    """SmolLM2-135M as proposer through the OpenAI-compatible server: poor code or none, never a crash."""
    spec = f"openai:smollm2-135m@{local_openai_server}"
    task = get_task("symptom2disease", data_dir=shared_data_dir)
    client = connect(spec, cache=False)
    # A 135M model on a shared CPU: keep its turns few and short.
    coding = get_proposer("coding", model=client, task=task, run_dir=tmp_path / "base", max_steps=3, max_tokens=160)
    proposals = coding.propose(_state(evals=1))
    assert len(proposals) <= 1
    assert (tmp_path / "base" / "proposer" / "iter-1" / "transcript.json").is_file()
    tps = get_proposer(
        "tps",
        model=client,
        task=task,
        task_model=keyword_model(),
        run_dir=tmp_path / "tps",
        probe_size=2,
        plans=1,
        max_steps=3,
        max_tokens=160,
    )
    assert len(tps.propose(_state(evals=1))) <= 1
    assert (tmp_path / "tps" / "proposer" / "iter-1" / "planning.json").is_file()

    # The whole loop with the same proposer model: one iteration, whatever it writes is recorded and the run ends.
    run = optimize(
        tmp_path / "run",
        1,
        env={"METAHARNESS_DATA_DIR": str(shared_data_dir)},
        timeout=800,
        proposer="coding",
        proposer_model=spec,
        val_limit=2,
        proposer_option=["max_steps=3", "max_tokens=160"],
        seeds="zero_shot",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    log = [json.loads(line) for line in (tmp_path / "run" / "summary.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log if r["type"] == "iteration"] == [0, 1]  # the seeds' iteration and one more
