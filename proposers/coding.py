"""``coding``: the Meta-Harness coding proposer, a tool-calling agent over a workspace copy of the run.

Each iteration the agent gets a fresh ``Workspace`` (code, scores and raw
traces of every candidate, failed attempts with their errors) and writes ``K`` new candidates, each copied from an
existing candidate and edited, import-checked on submit. Its instructions follow what worked in the Meta-Harness
paper: read the raw traces, not only the scores; mix exploitation and exploration; never hard-code dataset names or
answers; do not repeat what failed. The model is driven through the model clients' tool calling (Anthropic and
OpenAI-compatible alike), with ``tool_choice="required"`` so every turn is an action.

Valid submissions become proposals; when fewer than ``K`` pass the import check, failing ones are returned too, so
the loop records the failure with its error and the next iteration's workspace shows it. The transcript of every
iteration is written to ``<run_dir>/proposer/iter-<n>/`` when a run directory is known.

With a coding-agent CLI as the proposer model (``claude-code`` or ``codex``, ``.engines``), the CLI does the
writing instead: one headless session in the same workspace (``ENGINE_SYSTEM`` tells it to write
``new/<name>/harness.py`` and ``submission.json``), its submissions import-checked when it stops
(``Workspace.collect``), and one more session to fix those that fail; its event stream is the iteration's
``transcript.jsonl`` and, as messages, its ``transcript.json``.

The conversation sent to the model stays within its context window (``Transcript``): the system prompt, the
task and the last ``KEEP_TURNS`` turns are sent whole; when the estimate passes the budget (the window less the
answer's ``max_tokens``), older tool results become a one-line stub (``[compacted: 5400 chars of read_file
candidates/c1/traces.jsonl]``) and long arguments of older tool calls (whole files given to ``write_file``) a stub
of their length, oldest first, so a long session never overflows. The transcript file keeps everything whole.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from metaharness import frontier
from metaharness.errors import MetaharnessError
from metaharness.models import connect
from metaharness.models.openai_api import tool_call_to_openai
from metaharness.models.protocol import ChatRequest, ModelClient, StructuredOutputError, Tool, context_window
from metaharness.proposers.engines import EngineClient, is_engine
from metaharness.proposers.evidence import CHARS_PER_TOKEN
from metaharness.proposers.probe import Prober
from metaharness.proposers.workspace import Submission, Workspace
from metaharness.search.protocol import Proposal, RunState
from metaharness.tasks.protocol import Task

SYSTEM = """You are the proposer in a harness-optimisation loop (Meta-Harness). A harness is the Python program
around a fixed task model: how the prompt is built, which training examples are shown or retrieved, how the answer
is parsed. This iteration you write {k} new candidate harness(es) in the workspace, using the tools.

How to work:
1. Read summary.md and failures.md. Then read the code AND the traces of the best candidates and of failed ones
   (candidates/<id>/traces/index.md lists every example, failing first; candidates/<id>/traces/<example>.md holds
   the prompts the harness sent and the model's answers): find which examples they get wrong and why. Scores alone
   do not tell you what to fix.
2. For each new candidate: copy_candidate from a strong existing candidate, edit it (edit_file or write_file),
   run_on_train to see it work on a few held-out training examples, then submit it with its parent id, a one-line
   summary of the change and your hypothesis of why it helps. Submit runs an import check; fix what it reports.
3. Mix exploitation (a targeted fix to the best candidate) and exploration (a different idea: prompt, retrieval,
   answer parsing, voting, memory built from the training examples).
4. Never hard-code dataset names, example inputs or gold answers: the harness must work on unseen examples and may
   learn only from `train`. Keep to the standard library.
5. Remember what failed: summary.md lists failed attempts with their errors; do not repeat them.
When {k} candidate(s) are submitted, call finish."""

ENGINE_SYSTEM = """You are the proposer in a harness-optimisation loop (Meta-Harness). A harness is the Python program
around a fixed task model: how the prompt is built, which training examples are shown or retrieved, how the answer
is parsed. This session you write {k} new candidate harness(es) as files in the current folder (README.md
explains the layout and how to submit).

How to work:
1. Read summary.md and failures.md. Then read the code AND the traces of the best candidates and of failed ones
   (candidates/<id>/traces/index.md lists every example, failing first; candidates/<id>/traces/<example>.md holds
   the prompts the harness sent and the model's answers): find which examples they get wrong and why. Scores alone
   do not tell you what to fix.
2. For each new candidate: copy candidates/<parent>/harness.py to new/<name>/harness.py, edit it, and write
   new/<name>/submission.json with its parent id, a one-line summary of the change and your hypothesis of why it
   helps. Each submission is imported and constructed in a sandbox when you stop; keep it importable.
3. Mix exploitation (a targeted fix to the best candidate) and exploration (a different idea: prompt, retrieval,
   answer parsing, voting, memory built from the training examples).
4. Never hard-code dataset names, example inputs or gold answers: the harness must work on unseen examples and may
   learn only from `train`. Keep to the standard library.
5. Remember what failed: summary.md lists failed attempts with their errors; do not repeat them.
Write only under new/. Stop when {k} candidate(s) are written."""

MAX_STEPS = 40
MAX_BAD_TURNS = 3
# The proposer model's context window when the client does not know it (hosted models have more).
DEFAULT_CONTEXT_TOKENS = 32768
KEEP_TURNS = 6  # the latest turns (a model reply with its tool results) always sent whole
# Tokens are estimated from the characters of the request as OpenAI's wire format spells it (tool-call arguments are
# JSON inside JSON), with the evidence module's characters per token.
LOW_WATER = 0.6  # compacting goes on to this share of the budget, so the sent prefix changes seldom
STUB_ARGUMENT = 160  # tool-call arguments longer than this are stubbed in compacted turns


class ProposerEngineFailed(MetaharnessError):
    """A coding-agent CLI session ended without writing any candidate (its API refused, it crashed, it ran out of
    time): the iteration fails with the CLI's own message, and the next one tries again."""


def estimate_tokens(messages: list[dict[str, Any]], tools: list[Tool] | None = None) -> int:
    """A conservative token count of a request: its messages and tools as OpenAI's wire format spells them (JSON,
    non-ASCII escaped), in characters over CHARS_PER_TOKEN."""
    wire = []
    for message in messages:
        item: dict[str, Any] = {k: message[k] for k in ("role", "content", "tool_call_id") if k in message}
        if message.get("tool_calls"):
            item["tool_calls"] = [tool_call_to_openai(call) for call in message["tool_calls"]]
        wire.append(item)
    functions = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools or []
    ]
    return math.ceil((len(json.dumps(wire)) + len(json.dumps(functions))) / CHARS_PER_TOKEN)


def _describe(call: dict[str, Any]) -> str:
    arguments = call.get("arguments") or {}
    target = next((str(arguments[k]) for k in ("path", "name", "pattern", "candidate_id") if arguments.get(k)), "")
    return f"{call.get('name', 'a tool')} {target}".strip()


class Transcript:
    """The agent's conversation: ``full`` (every message whole, for the transcript file) and ``sent`` (what the
    next request carries), compacted to ``budget`` tokens as the module docstring describes."""

    def __init__(
        self, system: str, task: str, *, budget: int, tools: list[Tool] | None = None, keep_turns: int = KEEP_TURNS
    ) -> None:
        self.full: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": task}]
        self.sent = copy.deepcopy(self.full)
        self.budget = budget
        self.tools = tools
        self.keep_turns = keep_turns
        self.compacted = 0  # messages stubbed so far
        self._calls: dict[str, dict[str, Any]] = {}  # tool call id -> the call, to describe its result
        self._done: set[int] = set()  # indices of sent messages already stubbed

    def append(self, message: dict[str, Any]) -> None:
        self.full.append(message)
        self.sent.append(copy.deepcopy(message))
        for call in message.get("tool_calls") or []:
            self._calls[call["id"]] = call

    def tokens(self) -> int:
        return estimate_tokens(self.sent, self.tools)

    def messages(self) -> list[dict[str, Any]]:
        """The messages for the next request, within the budget whenever stubbing the older turns can get there."""
        if self.tokens() > self.budget:
            turns = [i for i, m in enumerate(self.sent) if m["role"] == "assistant"]
            for keep in (self.keep_turns, 1):
                # Everything before the last ``keep`` turns may be stubbed (never the system prompt and the task).
                limit = turns[-keep] if len(turns) >= keep else 2
                if self._compact(range(2, limit), target=int(self.budget * LOW_WATER)):
                    break
        return self.sent

    def _compact(self, indices: range, *, target: int) -> bool:
        for index in indices:
            if self.tokens() <= target:
                return True
            if index in self._done:
                continue
            message = self.sent[index]
            if message["role"] == "tool":
                size = len(message.get("content") or "")
                call = self._calls.get(message.get("tool_call_id") or "", {})
                message["content"] = f"[compacted: {size} chars of {_describe(call)}]"
            else:
                content = message.get("content") or ""
                if len(content) > STUB_ARGUMENT:
                    message["content"] = f"[compacted: {len(content)} chars]"
                for call in message.get("tool_calls") or []:
                    call["arguments"] = {
                        key: f"[compacted: {len(value)} chars]"
                        if isinstance(value, str) and len(value) > STUB_ARGUMENT
                        else value
                        for key, value in (call.get("arguments") or {}).items()
                    }
            self._done.add(index)
            self.compacted += 1
        return self.tokens() <= self.budget


def run_agent(
    model: ModelClient,
    workspace: Workspace,
    system: str,
    task: str,
    *,
    k: int,
    max_steps: int = MAX_STEPS,
    max_tokens: int = 4096,
    context_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Drive the tool-calling loop until ``k`` valid submissions, ``finish``, or ``max_steps``; return the whole
    messages. Each request fits ``context_tokens`` (default: the model's window, else DEFAULT_CONTEXT_TOKENS)
    with room for ``max_tokens`` of answer (``Transcript``)."""
    tools = workspace.tools()
    schemas = [tool for tool, _ in tools.values()]
    window = context_tokens or context_window(model) or DEFAULT_CONTEXT_TOKENS
    transcript = Transcript(system, task, budget=max(window - max_tokens, 1), tools=schemas)
    bad_turns = 0
    for _ in range(max_steps):
        if workspace.finished or len(workspace.valid()) >= k:
            break
        request = ChatRequest(
            transcript.messages(),
            temperature=0.0,
            max_tokens=max_tokens,
            tools=schemas,
            tool_choice="required",
        )
        try:
            result = model.complete(request, role="proposer")
            calls = result.tool_calls
            text = result.text or ""
        except StructuredOutputError as exc:  # a malformed tool call even after the client's repair request
            calls, text = [], f"(invalid tool call: {exc})"
        if not calls:
            bad_turns += 1
            transcript.append({"role": "assistant", "content": text or "(no tool call)"})
            transcript.append(
                {
                    "role": "user",
                    "content": "Reply with a tool call (for example read_file or submit); call finish when done.",
                }
            )
            if bad_turns >= MAX_BAD_TURNS:
                break
            continue
        bad_turns = 0
        transcript.append({"role": "assistant", "content": text, "tool_calls": [asdict(c) for c in calls]})
        for call in calls:
            output = workspace.call(call.name, call.arguments)
            transcript.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return transcript.full


def submitted(workspace: Workspace, k: int) -> list[Submission]:
    """Valid submissions first; failing ones fill the rest so the loop records them (and their errors)."""
    ordered = workspace.valid() + [s for s in workspace.submissions.values() if s.error is not None]
    return ordered[:k]


def to_proposal(submission: Submission) -> Proposal:
    s = submission
    return Proposal(s.parent, s.source, s.summary or f"revision {s.name}", s.hypothesis)


class CodingProposer:
    """The ``coding`` proposer (once ``base``). ``model``: the proposer's ModelClient (or spec); ``task``: the
    Task; ``task_model``: the task model, used by the agent's ``run_on_train`` tool (held-out training examples,
    never val)."""

    name = "coding"

    def __init__(
        self,
        model: ModelClient | str,
        task: Task,
        task_model: ModelClient | str | None = None,
        *,
        run_dir: str | Path | None = None,
        probe_size: int = 4,
        seed: int = 0,
        workers: int | None = None,
        max_steps: int = MAX_STEPS,
        max_tokens: int = 4096,
        context_tokens: int | None = None,
    ) -> None:
        if isinstance(model, str):
            model = EngineClient(model) if is_engine(model) else connect(model)
        self.model: ModelClient = model
        self.engine = model if isinstance(model, EngineClient) else None
        self.task = task
        self.run_dir = Path(run_dir) if run_dir else None
        self.max_steps = max_steps
        self.max_tokens = max_tokens  # per agent turn: room for a whole harness file in one write_file call
        self.context_tokens = context_tokens  # the proposer model's window (None: the client's, else a default)
        self._tmp = tempfile.TemporaryDirectory(prefix="metaharness-proposer-")
        self.prober = Prober(task, task_model, size=probe_size, seed=seed, workers=workers) if task_model else None

    def _folder(self, state: RunState) -> Path:
        root = self.run_dir or state.run_dir
        base = Path(root) / "proposer" if root else Path(self._tmp.name)
        return base / f"iter-{state.iteration}"

    def _check(self, path: Path) -> str | None:
        # Here: `python -m metaharness.proposers.agent_sandbox` imports this package, and must not load the evaluator.
        from metaharness.evaluation import HarnessInvalid, check_harness

        try:
            check_harness(path, self.task)
        except HarnessInvalid as exc:
            return str(exc)
        return None

    def workspace(self, state: RunState) -> Workspace:
        folder = self._folder(state)
        return Workspace(
            folder / "workspace",
            state,
            task_description=getattr(self.task, "description", ""),
            probe=self.prober.run if self.prober else None,
            check=self._check,
            submit_by_file=self.engine is not None,
        )

    def write(self, state: RunState, workspace: Workspace, brief: str, k: int) -> list[dict[str, Any]]:
        """Run the agent with ``brief`` as its task message and keep the transcript beside the workspace."""
        if self.engine is not None:
            return self.write_with_engine(self.engine, state, workspace, brief, k)
        messages = run_agent(
            self.model,
            workspace,
            SYSTEM.format(k=k),
            brief,
            k=k,
            max_steps=self.max_steps,
            max_tokens=self.max_tokens,
            context_tokens=self.context_tokens,
        )
        transcript = workspace.root.parent / "transcript.json"
        transcript.write_text(json.dumps(messages, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        return messages

    def write_with_engine(
        self, engine: EngineClient, state: RunState, workspace: Workspace, brief: str, k: int
    ) -> list[dict[str, Any]]:
        """A coding-agent CLI session writes the candidates (the module docstring); a second session fixes the
        submissions whose import check failed. Raises when the CLI failed and nothing was written."""
        folder = workspace.root.parent
        usd_left = state.money_left.usd if math.isfinite(state.money_left.usd) else None
        run = engine.run_agent(
            workspace.root, ENGINE_SYSTEM.format(k=k), brief, folder=folder, budget_usd=usd_left, turns=self.max_steps
        )
        messages = run.messages
        lines = workspace.collect()
        failing = [s for s in workspace.submissions.values() if s.error is not None]
        if run.error is None and failing and len(workspace.valid()) < k:
            problems = "\n".join(f"- new/{s.name}: {s.error}" for s in failing)
            fix = f"These submissions failed their import check; fix each file (keep its submission.json):\n{problems}"
            usd_left = None if usd_left is None else max(0.0, usd_left - (run.dollars or 0.0))
            second = engine.run_agent(
                workspace.root, ENGINE_SYSTEM.format(k=k), fix, folder=folder, budget_usd=usd_left, turns=self.max_steps
            )
            messages += second.messages
            lines = workspace.collect()
            run.error = second.error
        messages.append({"role": "user", "content": "Submitted:\n" + "\n".join(lines or ["nothing"])})
        (folder / "transcript.json").write_text(
            json.dumps(messages, indent=1, ensure_ascii=False, default=str), encoding="utf-8"
        )
        if run.error is not None and not workspace.submissions:
            raise ProposerEngineFailed(f"{engine.spec} wrote no candidate: {run.error}")
        return messages

    def propose(self, state: RunState) -> list[Proposal]:
        k = state.proposals
        if k < 1 or not state.candidates:
            return []
        if self.prober is not None:
            self.prober.meter = state.predicting  # its runs on training examples are spent from the iteration's budget
        workspace = self.workspace(state)
        best = frontier.best(state.candidates)
        brief = (
            f"Iteration {state.iteration}. Write {k} new candidate(s). The best so far is "
            f"{best.id if best else 'none'} with score {best.score if best else 0:.3f}. "
            + ("Start with summary.md." if self.engine else "Start with read_file summary.md.")
        )
        self.write(state, workspace, brief, k)
        return [to_proposal(s) for s in submitted(workspace, k)]
