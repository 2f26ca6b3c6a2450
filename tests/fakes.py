"""Test doubles for the project's seams. Each implements the real protocol, so the code under test cannot tell it
from the real thing; they are for unit tests of logic (real models run in the embedded-model and server tests).

- ``ScriptedModel``: a ``ModelClient`` that answers from a script: a fixed
  answer, or a function of the request (``in_order`` gives answers one request at a time). It records every
  request and role. It checks answers as the client layer does (schema, forced tool) unless ``raw=True``, which
  stands for a backend below ``Client``, or a client that does not check.
- ``ScriptedLM``: the ``lm`` a harness gets (``metaharness.candidates.protocol.LM``, the real class), its
  model call wired straight to the evaluator's proxy over a ``ScriptedModel`` (no sandbox process in between).
- ``ServedModel``: an OpenAI-compatible HTTP server on 127.0.0.1 answering with any model client, for code
  that only connects by URL (a child process such as ``metaharness plan serve``).
- ``MessagesAPI``: Anthropic's Messages API at the HTTP layer, under the real ``anthropic`` SDK, answering
  with queued responses of the recorded shape.
- ``ToyTask``: a ``Task`` held in memory (three validation examples), so the sandbox
  and evaluator tests run without the paper's data.
- ``FakeEvaluator``: a ``CandidateEvaluator`` that scores a
  program by the ``# score=`` comment ``program`` writes into it.
- ``ScriptedProposer``: a ``Proposer`` that revises the best candidate each
  iteration (+0.1), plus proposals scripted per iteration.
- Planner stages: ``FixedPlans`` (a plan sampler that gives the same plans every time), ``TableSimulator``
  (a state simulator that looks each subplan up in a table) and ``TableLabeler`` (a reward labeler that looks
  each state up in a table).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from metaharness import frontier
from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.candidates.protocol import LM
from metaharness.errors import BudgetExceeded, InputError
from metaharness.evaluation.protocol import CandidateFailed, Progress
from metaharness.evaluation.proxy import CallRecorder, ModelRef
from metaharness.evaluation.records import CallRecord, TracedMessage
from metaharness.models import RetryPolicy, connect
from metaharness.models.client import Client
from metaharness.models.protocol import ChatRequest, ChatResult, Choice, Role, StructuredOutputError, Usage
from metaharness.models.structured import check_choice
from metaharness.planner.subagents import CandidatePlan, PlanningTask, PredictedState, SimulatedStep
from metaharness.search.protocol import Proposal, RunState
from metaharness.tasks import Example

# ---------------------------------------------------------------- model clients


class Samples(tuple):
    """An answer per sampled choice, in order (as many as ``request.n``); any other answer serves every choice."""


# One answer: text (a string), a JSON value (given as text and parsed), a whole Choice, an exception to raise, or
# Samples of those. A script is an answer, or a function from the request to an answer.
Script = Any


def in_order(*answers: Any) -> Callable[[ChatRequest], Any]:
    """A script that gives ``answers`` one request at a time; the last one repeats."""
    if not answers:
        raise ValueError("in_order needs at least one answer")
    queue = list(answers)
    lock = threading.Lock()

    def next_answer(request: ChatRequest) -> Any:
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    return next_answer


class ScriptedModel:
    """A model client that answers from ``script`` (see the module docstring); ``usage`` (10 input and 5 output
    tokens by default) is counted per choice and ``latency`` seconds pass before each answer, by ``sleep`` (a test
    with a clock of its own passes the function that moves it on). ``requests`` and ``roles`` record the calls, in
    order."""

    def __init__(
        self,
        script: Script = "",
        *,
        spec: str = "scripted:test",
        usage: Usage | None = None,
        latency: float = 0.0,
        sleep: Callable[[float], object] = time.sleep,
        raw: bool = False,
    ) -> None:
        self.spec = spec
        self.script = script
        self.usage = usage or Usage(10, 5)
        self.latency = latency
        self.sleep = sleep
        self.raw = raw
        self.requests: list[ChatRequest] = []
        self.roles: list[Role] = []
        self._lock = threading.Lock()

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        with self._lock:
            self.requests.append(request)
            self.roles.append(role)
        if self.latency:
            self.sleep(self.latency)
        answer = self.script(request) if callable(self.script) else self.script
        answers = answer if isinstance(answer, Samples) else Samples([answer] * request.n)
        if len(answers) != request.n:
            raise AssertionError(f"the script gave {len(answers)} samples for a request of n={request.n}")
        choices = [self._choice(request, a) for a in answers]
        n = len(choices)
        usage = Usage(self.usage.input_tokens * n, self.usage.output_tokens * n)
        return ChatResult(choices, usage, self.latency, self.spec)

    def _choice(self, request: ChatRequest, answer: Any) -> Choice:
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, Choice):
            choice = answer
        elif isinstance(answer, str):
            choice = Choice(answer)
        else:
            choice = Choice(json.dumps(answer), parsed=answer)
        if not self.raw:
            problem = check_choice(request, choice)
            if problem is not None:
                raise StructuredOutputError(f"{self.spec}: {problem}; answer {choice.text[:200]!r}")
        return choice


class ScriptedLM(LM):
    """The harness's real ``lm``, its model call wired straight to the evaluator's proxy over ``ScriptedModel(script)``:
    calls are built, checked and recorded as in an evaluation (``recorder.calls`` holds the trace records), and a
    failed call raises ``lm.Error``. ``requests`` are the chat requests the model got."""

    def __init__(self, script: Script = "", *, context_window: int = 2048) -> None:
        self.model = ScriptedModel(script)
        self.recorder = CallRecorder(ModelRef(self.model))
        super().__init__(lambda request: self.recorder(json.loads(json.dumps(request))), context_window)

    @property
    def requests(self) -> list[ChatRequest]:
        return self.model.requests


# ---------------------------------------------------------------- over HTTP


def send_json(
    handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
) -> None:
    """Answer the request ``handler`` is serving with ``payload`` as JSON."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    for name, value in {"content-type": "application/json", **(headers or {})}.items():
        handler.send_header(name, value)
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema of an OpenAI ``response_format`` (either shape the client sends), or None."""
    form = body.get("response_format") or {}
    return form.get("json_schema", {}).get("schema") if form.get("type") == "json_schema" else form.get("schema")


class ServedModel:
    """``model`` behind ``GET /v1/models`` and ``POST /v1/chat/completions`` at ``base_url`` (text answers)."""

    def __init__(self, model: Any, name: str = "scripted") -> None:
        served = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                models = [{"id": name, "object": "model", "created": 0, "owned_by": "test"}]
                send_json(self, 200, {"object": "list", "data": models})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                send_json(self, 200, served.answer(body))

        self.model = model
        self.name = name
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion for one request body, in OpenAI's response shape."""
        request = ChatRequest(
            body["messages"],
            temperature=body.get("temperature", 0.0),
            max_tokens=body.get("max_tokens") or body.get("max_completion_tokens") or 512,
            n=body.get("n", 1),
            stop=body.get("stop"),
            json_schema=_schema_of(body),
            seed=body.get("seed"),
        )
        result = self.model.complete(request)
        choices = [
            {"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": c.text}}
            for i, c in enumerate(result.choices)
        ]
        usage = {
            "prompt_tokens": result.usage.input_tokens,
            "completion_tokens": result.usage.output_tokens,
            "total_tokens": result.usage.input_tokens + result.usage.output_tokens,
        }
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": self.name,
            "choices": choices,
            "usage": usage,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# The anthropic SDK's HTTP library: httpx2 in current releases, httpx in older ones.
http = importlib.import_module("httpx2" if importlib.util.find_spec("httpx2") else "httpx")


class MessagesAPI:
    """An ``httpx.MockTransport`` handler answering each ``POST /v1/messages`` with the next queued response: a
    body (answered 200) or ``(status, body, headers)``. It checks the API key and version headers and keeps every
    request body in ``requests``."""

    def __init__(self, *responses: Any, key: str = "sk-ant-test") -> None:
        self.responses = list(responses)
        self.key = key
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        assert request.url.path == "/v1/messages" and request.method == "POST"
        auth = request.headers.get("x-api-key") or request.headers.get("authorization", "")
        assert auth.endswith(self.key) and "anthropic-version" in request.headers
        self.requests.append(json.loads(request.content))
        answer = self.responses.pop(0)
        status, body, headers = answer if isinstance(answer, tuple) else (200, answer, {"request-id": "req_1"})
        return http.Response(status, json=body, headers=headers)

    def client(self, model: str, *, retry: RetryPolicy | None = None) -> Client:
        """The real client for ``anthropic:MODEL``, talking to this API (set ``ANTHROPIC_API_KEY`` to ``key``)."""
        transport = http.Client(transport=http.MockTransport(self))
        return connect(f"anthropic:{model}", cache=False, retry=retry, http_client=transport)


# ---------------------------------------------------------------- the task seam


class ToyTask:
    """Symptoms in, a diagnosis in ``[DIAGNOSIS]...[/DIAGNOSIS]`` tags out, scored by exact match (``primary``).

    ``val-0000`` mentions a back, ``val-0001`` is dengue and mentions shivering, ``val-0002`` neither, so a test
    harness can misbehave on chosen examples."""

    name = "toy-diagnosis"
    description = "Name the disease; answer as [DIAGNOSIS]name[/DIAGNOSIS]."
    SPLITS = {
        "train": [
            ("train-0000", "High fever, a rash and pain behind the eyes.", "dengue"),
            ("train-0001", "Itchy red rings on the skin.", "fungal infection"),
        ],
        "val": [
            ("val-0000", "Silvery scales on my back and elbows.", "psoriasis"),
            ("val-0001", "I am shivering with a high fever and my joints ache.", "dengue"),
            ("val-0002", "An itchy red ring on my arm.", "fungal infection"),
        ],
    }

    def load(self, split: str) -> list[Example]:
        if split not in self.SPLITS:
            raise InputError(f"the toy task has no split {split!r}")
        return [Example(id, text, target) for id, text, target in self.SPLITS[split]]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        found = re.search(r"\[DIAGNOSIS\](.*?)\[/DIAGNOSIS\]", prediction, re.S)
        return {"primary": float(found is not None and found.group(1).strip().lower() == example.target)}

    def metric_names(self) -> list[str]:
        return ["primary"]


# ---------------------------------------------------------------- the loop's seams


def program(score: float, extra: str = "") -> str:
    """A harness program that ``FakeEvaluator`` scores ``score``; ``extra`` may hold ``broken`` or ``crash``."""
    return f"# score={score}\nclass Harness:\n    def __init__(self, lm, train):\n        pass\n{extra}"


def seed_candidate(cid: str, name: str, source: str, score: float, cost: dict[str, float]) -> Candidate:
    """Seed harness ``name`` committed as candidate ``cid`` at iteration 0, scored ``score`` on val at ``cost``."""
    return Candidate(
        id=cid,
        parent=None,
        source=source,
        iteration=0,
        summary=f"seed: {name}",
        evaluation=Evaluation("val", {"primary": score}, cost),
    )


def traced_messages(call: CallRecord) -> list[TracedMessage]:
    """The messages of a recorded model call that sent a list of message objects (asserted)."""
    messages = call.get("messages")
    assert isinstance(messages, list)
    objects = [m for m in messages if not isinstance(m, str)]
    assert len(objects) == len(messages), messages
    return objects


class FakeEvaluator:
    """Scores a program by its ``# score=`` comment on each of 4 examples (every example scores it). A program
    holding ``broken`` fails the import check, one holding ``crash`` cannot start (``CandidateFailed``); the test
    split is available only when ``test_available``. ``evaluated`` lists (candidate folder name, split) in order, one
    entry per call (a staged evaluation calls once per stage)."""

    EXAMPLES = ["1", "2", "3", "4"]

    def __init__(self) -> None:
        self.evaluated: list[tuple[str, str]] = []
        self.test_available = False

    def check(self, harness: Path) -> str | None:
        return "SyntaxError: broken on purpose" if "broken" in harness.read_text() else None

    def examples(self, split: str) -> list[str]:
        return list(self.EXAMPLES)

    def evaluate(
        self,
        harness: Path,
        split: str,
        *,
        trace_path: Path,
        progress: Progress | None = None,
        examples: Sequence[str] | None = None,
    ) -> Evaluation:
        text = Path(harness).read_text()
        if "crash" in text:
            raise CandidateFailed("the harness could not start")
        found = re.search(r"score=([0-9.]+)", text)
        assert found is not None, "FakeEvaluator scores programs written by program()"
        score = float(found.group(1))
        ids = list(examples) if examples is not None else self.examples(split)
        Path(trace_path).write_text("".join(f'{{"id": "{i}"}}\n' for i in ids))
        self.evaluated.append((Path(harness).parent.name, split))
        if progress:
            for done in range(1, len(ids) + 1):
                progress(done, len(ids))
        return Evaluation(
            split,
            {"primary": score, "accuracy": score},
            {"context_tokens": 100 * score, "input_tokens": 10 * len(ids) / 4, "charged_examples": float(len(ids))},
            len(ids),
            example_ids=ids,
            example_scores=[score] * len(ids),
        )

    def split_unavailable(self, split: str) -> str | None:
        return None if self.test_available else f"no {split} split offline"


class ScriptedProposer:
    """Each iteration proposes the best candidate +0.1 (predicting +0.05), then ``extra[iteration]``; raises
    ``BudgetExceeded`` at iteration ``budget_at``. ``states`` keeps every ``RunState`` it saw."""

    name = "scripted"

    def __init__(self, extra: dict[int, list[Proposal]] | None = None, budget_at: int | None = None) -> None:
        self.extra = extra or {}
        self.budget_at = budget_at
        self.states: list[RunState] = []

    def propose(self, state: RunState) -> list[Proposal]:
        self.states.append(state)
        if state.iteration == self.budget_at:
            raise BudgetExceeded("Dollar cap reached")
        best = frontier.best(state.candidates)
        assert best is not None, "ScriptedProposer revises an evaluated candidate"
        better = Proposal(
            parent=best.id,
            source=program(round(best.score + 0.1, 3)),
            summary=f"improve {best.id}",
            hypothesis="more is better",
            prediction=Prediction(score=best.score + 0.05),
        )
        return [better, *self.extra.get(state.iteration, [])]


# ---------------------------------------------------------------- planner stages


class FixedPlans:
    """A ``PlanSampler`` that gives the same plans, the first ``plans``, every time
    (each given as a ``CandidatePlan`` or its subplans). ``tasks`` records what it was asked, in order."""

    def __init__(self, *plans: CandidatePlan | Sequence[str]) -> None:
        self.plans = [p if isinstance(p, CandidatePlan) else CandidatePlan(tuple(p)) for p in plans]
        self.tasks: list[PlanningTask] = []

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        self.tasks.append(task)
        return self.plans[:plans]


class TableSimulator:
    """A ``StateSimulator`` that predicts each subplan's step from a table
    (subplan -> step), whatever state it starts from."""

    def __init__(self, table: Mapping[str, SimulatedStep]) -> None:
        self.table = dict(table)

    def simulate(self, task: PlanningTask, plan: CandidatePlan) -> list[SimulatedStep]:
        return [self.table[subplan] for subplan in plan.subplans]


class TableLabeler:
    """A ``RewardLabeler`` that labels each state from a table of its text
    (``by="state"``) or its key (``by="key"``); a state not in the table gets ``default`` (0, neutral)."""

    def __init__(self, labels: Mapping[str, int], *, by: Literal["state", "key"] = "state", default: int = 0) -> None:
        self.labels = dict(labels)
        self.by = by
        self.default = default

    def label(self, task: PlanningTask, states: list[PredictedState]) -> list[int]:
        found = (state.state if self.by == "state" else state.key for state in states)
        return [self.default if text is None else self.labels.get(text, self.default) for text in found]
