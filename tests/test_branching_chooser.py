"""The model-backed chooser and the bench runner, against a scripted client (request shapes and bookkeeping only;
the embedded model's runs are recorded in reports/tools/)."""

from __future__ import annotations

import json
import math
import re

import pytest
from fakes import Samples, ScriptedModel

from metaharness.agents.branching import StepView
from metaharness.agents.environments.toolworld import ToolWorld
from metaharness.agents.tool_bench import ToolAgentSettings, run_task, summarize
from metaharness.agents.tool_chooser import ModelToolChooser
from metaharness.models.protocol import Choice, TokenLogprob, Usage


@pytest.fixture(scope="module")
def task():
    return ToolWorld(seed=1).generate_tasks(1, seed=2, min_steps=6)[0]


def first_option(step, name, enum):
    return enum[0]


def tool_model(pick, fill=first_option):
    """A model that answers tool choices with ``pick(step, enum, sample)``, one per sample, and argument fills
    with ``fill(step, name, enum)``; a reflection (no schema) gets a fixed sentence."""

    def answer(request):
        schema = request.json_schema
        if schema is None:
            return "Step 2 used the wrong tool."
        found = re.search(r"Current step (\d+):", request.messages[-1]["content"])
        assert found is not None
        step = int(found.group(1)) - 1
        props = schema["properties"]
        if "tool" not in props:
            return {name: fill(step, name, option["enum"]) for name, option in props.items()}
        thought = {"thought": "Step 2 needs the buyer."} if "thought" in props else {}
        return Samples({**thought, "tool": pick(step, props["tool"]["enum"], i)} for i in range(request.n))

    return ScriptedModel(answer, usage=Usage(100, 10))


def _view(task, index=0):
    return StepView(task.goal, task.instructions, index, task.candidates(index), [], list(task.constants))


def test_black_box_vote_is_one_request_with_n_samples_over_an_enum(task):
    client = tool_model(lambda step, enum, i: enum[i % 2])
    chooser = ModelToolChooser(client, temperature=0.7, seed=3)
    vote = chooser.vote(_view(task), 5)
    (request,) = client.requests
    names = [t.name for t in task.candidates(0)]
    assert request.n == 5 and request.temperature == 0.7 and request.seed is not None
    assert request.json_schema["properties"]["tool"]["enum"] == names
    assert vote.counts == {names[0]: 3, names[1]: 2}
    assert chooser.meter.to_dict() == {"calls": 1, "samples": 5, "input_tokens": 500, "output_tokens": 50}


def test_white_box_vote_reads_the_tool_name_log_probabilities(task):
    names = [t.name for t in task.candidates(0)]
    first, second = names[0], names[1]

    prefix = '{"tool": "'
    tokens = [
        TokenLogprob(prefix, 0.0, ((prefix, 0.0),)),
        TokenLogprob(first, math.log(0.7), ((first, math.log(0.7)), (second, math.log(0.2)))),
        TokenLogprob('"}', 0.0, (('"}', 0.0),)),
    ]
    client = ScriptedModel(Choice(prefix + first + '"}', logprobs=tokens))
    chooser = ModelToolChooser(client, uncertainty="logprobs")
    vote = chooser.vote(_view(task), 5)
    (request,) = client.requests
    assert request.n == 1 and request.temperature == 0 and request.logprobs == 5
    assert vote.probs[first] == pytest.approx(0.7 / 0.9) and vote.probs[second] == pytest.approx(0.2 / 0.9)
    assert chooser.meter.samples == 1


def test_fill_constrains_every_argument_to_its_options(task):
    client = tool_model(pick=None)
    chooser = ModelToolChooser(client)  # the default fill takes the first allowed value
    tool = task.candidates(0)[0]
    args = chooser.fill(_view(task), tool, {"a": ["X", "Y"], "b": [1.5]})
    schema = client.requests[0].json_schema
    assert schema["properties"] == {"a": {"enum": ["X", "Y"]}, "b": {"enum": [1.5]}}
    assert args == {"a": "X", "b": 1.5} and client.requests[0].temperature == 0


def test_react_asks_for_a_thought_before_the_tool(task):
    client = tool_model(lambda step, enum, i: enum[0])
    ModelToolChooser(client, thought=True, temperature=0.0).vote(_view(task), 1)
    schema = client.requests[0].json_schema
    assert list(schema["properties"]) == ["thought", "tool"] and client.requests[0].temperature == 0
    pattern = re.compile(schema["properties"]["thought"]["pattern"])
    assert pattern.search("Step 2 needs the buyer, not the v1 endpoint.") and not pattern.search("one\ntwo")


@pytest.mark.parametrize("agent", ["egb", "majority", "react", "reflexion", "self-consistency"])
def test_bench_records_metrics_for_every_agent(task, agent):
    def right(step, enum, i):  # an oracle-like script: the accepted tool, except one wrong vote at step 2
        accepted = [n for n in enum if n in task.steps[step].accepted]
        return enum[0] if step == 1 and enum[0] not in accepted and i < 3 else accepted[0]

    def fill(step, name, enum):  # the reference value when the run so far produced it
        wanted = task.steps[step].arguments.get(name)
        return wanted if wanted in enum else enum[0]

    model = tool_model(right, fill)
    record = run_task(agent, task, model, ToolAgentSettings(samples=5, branch_budget=2))
    assert record["agent"] == agent and record["steps"] == len(task.steps)
    assert record["calls"] >= 1 and record["samples"] >= len(task.steps)
    assert record["input_tokens"] > 0 and 0 <= record["tool_match"] <= 1
    assert json.loads(json.dumps(record, default=str))["task"] == task.id
    assert task.candidates(1)[0].name not in task.steps[1].accepted  # the script's wrong votes are wrong
    if agent == "egb":  # the branch at step 2 (the only uncertain one) repairs the run
        assert record["success"] and record["tool_match"] == 1.0 and record["branches"] == 1
    else:  # a majority of 3:2 for the wrong tool, or single samples (always the first, wrong one), fail at step 2
        assert not record["success"] and record["tool_match"] == pytest.approx(1 - 1 / len(task.steps))
    reflections = sum(request.json_schema is None for request in model.requests)
    assert reflections == (2 if agent == "reflexion" else 0)  # reflexion retries twice, each after a reflection
    assert record["branches"] == {"egb": 1, "reflexion": 2}.get(agent, 0)
    summary = summarize([record])
    assert summary["success_rate"] == float(record["success"]) and summary["tasks"] == 1


def test_a_rerun_keeps_finished_records(tmp_path):
    from metaharness.agents.tool_bench import _finished

    out = tmp_path / "run.jsonl"
    lines = [
        {"task": "a", "agent": "egb", "model": "m"},
        {"task": "b", "agent": "react", "model": "m"},
        {"task": "c", "agent": "egb", "model": "m"},
    ]
    out.write_text("\n".join(json.dumps(r) for r in lines) + '\n{"task": "d", "age')
    assert [r["task"] for r in _finished(out, "egb", "m", {"a", "b", "d"})] == ["a"]
    assert _finished(tmp_path / "missing.jsonl", "egb", "m", {"a"}) == []


@pytest.mark.slow
def test_embedded_model_votes_over_the_candidate_enum(task):
    from metaharness.models import connect

    chooser = ModelToolChooser(connect("local:smollm2-135m", cache=False), seed=0)
    vote = chooser.vote(_view(task), 2)
    names = {t.name for t in task.candidates(0)}
    assert set(vote.probs) <= names and vote.counts is not None and sum(vote.counts.values()) == 2
    assert chooser.meter.calls == 1 and chooser.meter.usage.output_tokens > 0


def test_white_box_vote_without_log_probabilities_is_a_structured_output_error(task):
    from metaharness.models.protocol import StructuredOutputError

    client = tool_model(lambda step, enum, i: enum[0])  # answers without log-probabilities
    with pytest.raises(StructuredOutputError, match="--uncertainty sample"):
        ModelToolChooser(client, uncertainty="logprobs").vote(_view(task), 5)
