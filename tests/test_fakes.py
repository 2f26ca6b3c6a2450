"""The shared fakes (tests/fakes.py) keep the contracts they stand for, so what passes on a fake holds for the
real seam: a model client's choices and structured output, the harness's lm, the served HTTP API, the loop's
evaluator and proposer."""

from __future__ import annotations

import inspect

import pytest
from fakes import FakeEvaluator, Samples, ScriptedLM, ScriptedModel, ScriptedProposer, ServedModel, in_order

from metaharness.candidates.protocol import LM
from metaharness.evaluation.protocol import CandidateEvaluator
from metaharness.models import connect
from metaharness.models.protocol import ChatRequest, Choice, ModelClient, StructuredOutputError, Tool, ToolCall, Usage
from metaharness.search.protocol import Proposer

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def ask(text: str = "hi", **fields) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], **fields)


def test_scripted_model_gives_exactly_n_choices_and_records_calls():
    model = ScriptedModel(lambda request: Samples(f"{request.messages[-1]['content']} {i}" for i in range(request.n)))
    assert isinstance(model, ModelClient)
    result = model.complete(ask("answer", n=3), role="agent")
    assert [c.text for c in result.choices] == ["answer 0", "answer 1", "answer 2"]
    assert result.usage == Usage(30, 15) and result.model == "scripted:test"
    assert model.roles == ["agent"] and model.requests[0].n == 3
    assert len(ScriptedModel("same").complete(ask(n=2)).choices) == 2  # one answer serves every choice
    with pytest.raises(AssertionError, match="2 samples for a request of n=3"):
        ScriptedModel(Samples(["a", "b"])).complete(ask(n=3))


def test_scripted_model_checks_answers_as_the_client_layer_does():
    model = ScriptedModel(in_order({"n": 1}, '{"n": 2}', "{not json", {"n": "two"}, RuntimeError("down")))
    assert model.complete(ask(json_schema=SCHEMA)).parsed == {"n": 1}
    assert model.complete(ask(json_schema=SCHEMA)).parsed == {"n": 2}  # text is parsed
    with pytest.raises(StructuredOutputError, match="not valid JSON"):
        model.complete(ask(json_schema=SCHEMA))
    with pytest.raises(StructuredOutputError, match="does not match the schema"):
        model.complete(ask(json_schema=SCHEMA))
    with pytest.raises(RuntimeError, match="down"):
        model.complete(ask())
    tool = Tool("f", "a function", SCHEMA)
    with pytest.raises(StructuredOutputError, match="no call of the tool 'f'"):
        ScriptedModel("I will not call it").complete(ask(tools=[tool], tool_choice="f"))
    call = Choice("", tool_calls=[ToolCall("c1", "f", {"n": 3})])
    assert ScriptedModel(call).complete(ask(tools=[tool], tool_choice="f")).tool_calls[0].arguments == {"n": 3}
    raw = ScriptedModel("{not json", raw=True).complete(ask(json_schema=SCHEMA))  # a backend: unchecked
    assert raw.text == "{not json" and raw.parsed is None
    with pytest.raises(ValueError, match="at least one answer"):
        in_order()


def test_scripted_lm_builds_requests_like_the_sandbox_worker():
    lm = ScriptedLM(in_order("a diagnosis", {"n": 4}, {"n": "four"}))
    assert isinstance(lm, LM)
    assert lm("Symptoms: fever", system="Diagnose.", max_tokens=16, stop=["\n"]) == "a diagnosis"
    first = lm.requests[0]
    assert first.messages == [
        {"role": "system", "content": "Diagnose."},
        {"role": "user", "content": "Symptoms: fever"},
    ]
    assert (first.max_tokens, first.stop, first.temperature) == (16, ["\n"], 0.0)
    question = [{"role": "user", "content": "How many?"}]
    assert lm.json(question, SCHEMA) == {"n": 4}
    assert lm.requests[1].json_schema == SCHEMA and lm.requests[1].messages == question
    with pytest.raises(lm.Error, match="does not match the schema"):  # a failed call, as the harness sees it
        lm.json("How many?", SCHEMA)


def test_served_model_answers_through_the_real_openai_client():
    model = ScriptedModel(lambda request: Samples({"n": i} for i in range(request.n)))
    served = ServedModel(model)
    try:
        client = connect(f"openai:scripted@{served.base_url}", cache=False)
        result = client.complete(ask("count", json_schema=SCHEMA, n=2, temperature=0.5, max_tokens=9))
    finally:
        served.close()
    assert [c.parsed for c in result.choices] == [{"n": 0}, {"n": 1}]
    (request,) = model.requests
    assert request.json_schema == SCHEMA and request.messages[-1]["content"] == "count"
    assert (request.n, request.temperature, request.max_tokens) == (2, 0.5, 9)
    assert result.usage == Usage(20, 10)


def test_loop_fakes_have_the_seams_signatures():
    assert isinstance(ScriptedProposer(), Proposer)
    for method in ("check", "evaluate", "split_unavailable"):
        fake, seam = getattr(FakeEvaluator, method), getattr(CandidateEvaluator, method)
        assert list(inspect.signature(fake).parameters) == list(inspect.signature(seam).parameters), method
