"""``base``: the Meta-Harness coding proposer, a tool-calling agent over a workspace copy of the run.

Each iteration the agent gets a fresh :class:`~metaharness.proposers.workspace.Workspace` (code, scores and raw
traces of every candidate, failed attempts with their errors) and writes ``K`` new candidates, each copied from an
existing candidate and edited, import-checked on submit. Its instructions follow what worked in the Meta-Harness
paper: read the raw traces, not only the scores; mix exploitation and exploration; never hard-code dataset names or
answers; do not repeat what failed. The model is driven through the model clients' tool calling (Anthropic and
OpenAI-compatible alike), with ``tool_choice="required"`` so every turn is an action.

Valid submissions become proposals; when fewer than ``K`` pass the import check, failing ones are returned too, so
the loop records the failure with its error and the next iteration's workspace shows it. The transcript of every
iteration is written to ``<run_dir>/proposer/iter-<n>/`` when a run directory is known.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from metaharness import frontier
from metaharness.models.types import ChatRequest, ModelClient, StructuredOutputError
from metaharness.proposal import Proposal, RunState
from metaharness.proposers.probe import Prober
from metaharness.proposers.workspace import Submission, Workspace
from metaharness.tasks.task import Task

SYSTEM = """You are the proposer in a harness-optimisation loop (Meta-Harness). A harness is the Python program
around a fixed task model: how the prompt is built, which training examples are shown or retrieved, how the answer
is parsed. This iteration you write {k} new candidate harness(es) in the workspace, using the tools.

How to work:
1. Read summary.md. Then read the code AND the raw traces (candidates/<id>/traces.jsonl) of the best candidates
   and of failed ones: find which examples they get wrong and why (compare prediction, target and the model's raw
   response). Scores alone do not tell you what to fix.
2. For each new candidate: copy_candidate from a strong existing candidate, edit it (edit_file or write_file),
   run_on_train to see it work on a few held-out training examples, then submit it with its parent id, a one-line
   summary of the change and your hypothesis of why it helps. Submit runs an import check; fix what it reports.
3. Mix exploitation (a targeted fix to the best candidate) and exploration (a different idea: prompt, retrieval,
   answer parsing, voting, memory built from the training examples).
4. Never hard-code dataset names, example inputs or gold answers: the harness must work on unseen examples and may
   learn only from `train`. Keep to the standard library.
5. Remember what failed: summary.md lists failed attempts with their errors; do not repeat them.
When {k} candidate(s) are submitted, call finish."""

MAX_STEPS = 40
MAX_BAD_TURNS = 3


def run_agent(
    model: ModelClient,
    workspace: Workspace,
    system: str,
    task: str,
    *,
    k: int,
    max_steps: int = MAX_STEPS,
    max_tokens: int = 4096,
) -> list[dict[str, Any]]:
    """Drive the tool-calling loop until ``k`` valid submissions, ``finish``, or ``max_steps``; return the messages."""
    tools = workspace.tools()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    bad_turns = 0
    for _ in range(max_steps):
        if workspace.finished or len(workspace.valid()) >= k:
            break
        request = ChatRequest(
            messages,
            temperature=0.0,
            max_tokens=max_tokens,
            tools=[tool for tool, _ in tools.values()],
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
            messages += [
                {"role": "assistant", "content": text or "(no tool call)"},
                {
                    "role": "user",
                    "content": "Reply with a tool call (for example read_file or submit); call finish when done.",
                },
            ]
            if bad_turns >= MAX_BAD_TURNS:
                break
            continue
        bad_turns = 0
        messages.append({"role": "assistant", "content": text, "tool_calls": [asdict(c) for c in calls]})
        for call in calls:
            output = workspace.call(call.name, call.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return messages


def submitted(workspace: Workspace, k: int) -> list[Submission]:
    """Valid submissions first; failing ones fill the rest so the loop records them (and their errors)."""
    ordered = workspace.valid() + [s for s in workspace.submissions.values() if s.error is not None]
    return ordered[:k]


def to_proposal(submission: Submission) -> Proposal:
    s = submission
    return Proposal(s.parent, s.source, s.summary or f"revision {s.name}", s.hypothesis)


class CodingProposer:
    """The ``base`` proposer. ``model``: the proposer's ModelClient (or spec); ``task``: the Task; ``task_model``:
    the task model, used by the agent's ``run_on_train`` tool (held-out training examples, never val)."""

    name = "base"

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
    ) -> None:
        if isinstance(model, str):
            from metaharness.models import connect

            model = connect(model)
        self.model = model
        self.task = task
        self.run_dir = Path(run_dir) if run_dir else None
        self.max_steps = max_steps
        self.max_tokens = max_tokens  # per agent turn: room for a whole harness file in one write_file call
        self._tmp = tempfile.TemporaryDirectory(prefix="metaharness-proposer-")
        self.prober = Prober(task, task_model, size=probe_size, seed=seed, workers=workers) if task_model else None

    def _folder(self, state: RunState) -> Path:
        root = self.run_dir or state.run_dir
        base = Path(root) / "proposer" if root else Path(self._tmp.name)
        return base / f"iter-{state.iteration}"

    def _check(self, path: Path) -> str | None:
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
        )

    def write(self, state: RunState, workspace: Workspace, brief: str, k: int) -> list[dict[str, Any]]:
        """Run the agent with ``brief`` as its task message and keep the transcript beside the workspace."""
        messages = run_agent(
            self.model, workspace, SYSTEM.format(k=k), brief, k=k, max_steps=self.max_steps, max_tokens=self.max_tokens
        )
        transcript = workspace.root.parent / "transcript.json"
        transcript.write_text(json.dumps(messages, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        return messages

    def propose(self, state: RunState) -> list[Proposal]:
        k = state.evals_left
        if k < 1 or not state.candidates:
            return []
        workspace = self.workspace(state)
        best = frontier.best(state.candidates)
        brief = (
            f"Iteration {state.iteration}. Write {k} new candidate(s). The best so far is "
            f"{best.id if best else 'none'} with score {best.score if best else 0:.3f}. "
            "Start with read_file summary.md."
        )
        self.write(state, workspace, brief, k)
        return [to_proposal(s) for s in submitted(workspace, k)]
