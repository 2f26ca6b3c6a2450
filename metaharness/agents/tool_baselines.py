"""Baselines for long tool plans, in the same harness as EGB (same plan, retrieval, simulator and chooser).

- ReAct: one greedy choice per step, with a short thought before the tool (``ModelToolChooser(thought=True)``).
- Reflexion-style retry: after a rejected result the model writes a one-sentence reflection on what went wrong;
  the plan is run again with the reflections in the prompt, up to ``attempts`` runs.
- Self-consistency: ``paths`` independently sampled runs; the most common final result is the answer (no verifier).
- Random re-tries (``run_retries`` without reflection, sampled choices): the control for EGB at equal budget.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

from metaharness.agents.branching import ExecutionResult, PlanEnvironment, ToolChooser, Trajectory, execute_plan
from metaharness.agents.tool_chooser import ModelToolChooser
from metaharness.models.protocol import ChatRequest

Reflect = Callable[[PlanEnvironment, Trajectory], str]


def run_react(env: PlanEnvironment, chooser: ToolChooser) -> ExecutionResult:
    """A single pass, one choice per step; the verifier is only read for the record."""
    trajectory = execute_plan(env, chooser, 1)
    return ExecutionResult(
        trajectory, trajectory.complete and env.verify(trajectory.final), [trajectory], 0, chooser.meter
    )


def run_retries(
    env: PlanEnvironment, chooser: ToolChooser, *, attempts: int, samples: int = 1, reflect: Reflect | None = None
) -> ExecutionResult:
    """Run the whole plan up to ``attempts`` times until the verifier accepts; with ``reflect``, each rejected run
    adds a note that later runs see. The answer is the accepted run, else the last complete one."""
    notes: list[str] = []
    explored: list[Trajectory] = []
    for attempt in range(attempts):
        trajectory = execute_plan(env, chooser, samples, notes=notes)
        explored.append(trajectory)
        if not trajectory.complete:
            break
        if env.verify(trajectory.final):
            return ExecutionResult(trajectory, True, explored, attempt, chooser.meter)
        if reflect is not None and attempt + 1 < attempts:
            notes.append(reflect(env, trajectory))
    complete = [t for t in explored if t.complete] or explored
    return ExecutionResult(complete[-1], False, explored, len(explored) - 1, chooser.meter)


def run_self_consistency(env: PlanEnvironment, chooser: ToolChooser, *, paths: int) -> ExecutionResult:
    """``paths`` sampled runs; the answer is the first run whose final result is the most common one."""
    explored: list[Trajectory] = []
    for _ in range(paths):
        explored.append(execute_plan(env, chooser, 1))
        if not explored[-1].complete:
            break
    complete = [t for t in explored if t.complete] or explored
    counts = Counter(_final_key(t) for t in complete)
    answer = max(complete, key=lambda t: counts[_final_key(t)])  # max keeps the first of equals
    return ExecutionResult(answer, answer.complete and env.verify(answer.final), explored, 0, chooser.meter)


def _final_key(trajectory: Trajectory) -> str:
    """A final result as text, so equal results count as one answer."""
    return json.dumps(trajectory.final, sort_keys=True, default=str)


def model_reflection(chooser: ModelToolChooser) -> Reflect:
    """A Reflexion reflector that asks the chooser's model (greedy, <= 60 tokens), charged to its meter."""

    def reflect(env: PlanEnvironment, trajectory: Trajectory) -> str:
        lines = [f"Goal: {env.goal}", "Your run:"]
        lines += [
            f"  step {s.index + 1}: {env.instructions[s.index]} -> {s.tool} -> "
            f"{json.dumps(s.observation, default=str)[:60]}"
            for s in trajectory.steps
        ]
        lines.append(
            "The final result was rejected. In one sentence, name the step that most likely used the wrong "
            "tool and which tool to use there instead."
        )
        request = ChatRequest([{"role": "user", "content": "\n".join(lines)}], temperature=0.0, max_tokens=60)
        result = chooser.client.complete(request, role="agent")
        chooser.meter.add(1, result.usage)
        return result.text.strip().splitlines()[0][:200] if result.text.strip() else "(no reflection)"

    return reflect
