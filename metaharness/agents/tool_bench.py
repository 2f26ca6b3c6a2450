"""Long tool plans in ToolWorld with EGB and its baselines on any model (``metaharness bench tools``).

Each task is run by one agent; the record (JSONL, one line per task) holds success (exact match), tool match
rate, model calls, sampled choices, tokens, seconds and every explored trajectory with its votes. The summary
table is printed and written next to the records as ``<out>.summary.json``. A rerun with the same ``--out``
resumes: finished tasks are not run again.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from metaharness.errors import InputError

if TYPE_CHECKING:
    from metaharness.agents.branching import Downstream, ExecutionResult
    from metaharness.agents.environments.toolworld import ToolTask
    from metaharness.agents.tool_chooser import Uncertainty
    from metaharness.models.protocol import ModelClient

AGENTS = ("egb", "majority", "react", "reflexion", "self-consistency")
UNCERTAINTIES: tuple[Uncertainty, ...] = ("sample", "logprobs")
DOWNSTREAMS: tuple[Downstream, ...] = ("reuse", "revote")
METRICS = (
    "success_rate",
    "tool_match_rate",
    "calls_per_task",
    "samples_per_task",
    "tokens_per_task",
    "seconds_per_task",
    "errors",
)


@dataclass(frozen=True)
class ToolAgentSettings:
    """How a tool agent runs: ``samples`` votes per step (egb, majority) or sampled paths (self-consistency),
    ``branch_budget`` EGB branches or Reflexion retries, the vote's ``uncertainty`` estimate, EGB's ``downstream``
    mode, the sampling ``temperature`` and the ``seed`` of every sampled choice."""

    samples: int = 5
    branch_budget: int = 3
    uncertainty: Uncertainty = "sample"
    downstream: Downstream = "reuse"
    temperature: float = 0.7
    seed: int = 0

    @classmethod
    def checked(
        cls, samples: int, branch_budget: int, uncertainty: str, downstream: str, temperature: float, seed: int
    ) -> ToolAgentSettings:
        """Settings from user input (the fields in order); a value out of range is an InputError naming its
        command-line option."""
        if samples < 1 or branch_budget < 0:
            raise InputError("--samples must be at least 1 and --branch-budget at least 0.")
        estimate = _one_of(uncertainty, UNCERTAINTIES, "--uncertainty")
        return cls(
            samples, branch_budget, estimate, _one_of(downstream, DOWNSTREAMS, "--downstream"), temperature, seed
        )


def run_task(agent: str, task: ToolTask, client: ModelClient, settings: ToolAgentSettings) -> dict[str, Any]:
    """Run one agent on one ``ToolTask``; returns its record."""
    # Start-up: `metaharness --help` imports this module for its choices; the agents load when they run.
    from metaharness.agents.branching import run_egb
    from metaharness.agents.tool_baselines import model_reflection, run_react, run_retries, run_self_consistency
    from metaharness.agents.tool_chooser import ModelToolChooser
    from metaharness.models.protocol import StructuredOutputError

    samples, branch_budget, seed = settings.samples, settings.branch_budget, settings.seed
    greedy = agent in ("react", "reflexion")
    chooser = ModelToolChooser(
        client,
        uncertainty=settings.uncertainty if agent in ("egb", "majority") else "sample",
        temperature=0.0 if greedy else settings.temperature,
        thought=greedy,
        seed=seed,
    )
    runs: dict[str, Callable[[], ExecutionResult]] = {
        "egb": lambda: run_egb(
            task, chooser, samples=samples, branch_budget=branch_budget, downstream=settings.downstream, seed=seed
        ),
        "majority": lambda: run_egb(task, chooser, samples=samples, branch_budget=0),
        "react": lambda: run_react(task, chooser),
        "reflexion": lambda: run_retries(task, chooser, attempts=1 + branch_budget, reflect=model_reflection(chooser)),
        "self-consistency": lambda: run_self_consistency(task, chooser, paths=samples),
    }
    start = time.perf_counter()
    record: dict[str, Any] = {
        "task": task.id,
        "agent": agent,
        "model": client.spec,
        "steps": len(task.steps),
        "retrieval_recall": task.retrieval_recall(),
    }
    try:
        result = runs[agent]()
    except StructuredOutputError as exc:  # one task's failure, not the run's
        record |= {"success": False, "tool_match": 0.0, "error": str(exc), **chooser.meter.to_dict()}
    else:
        record |= {
            "success": task.verify(result.answer.final),
            "tool_match": task.tool_match(result.answer.tools),
            "branches": result.branches,
            **chooser.meter.to_dict(),
            "final": result.answer.final,
            "reference": task.answer,
            "trajectories": [t.to_dict() for t in result.trajectories],
        }
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate, tool match rate, and mean model calls, samples, tokens and seconds per task."""

    def mean(key: str) -> float:
        return round(statistics.fmean(r[key] for r in records), 3)

    return {
        "tasks": len(records),
        "success_rate": mean("success"),
        "tool_match_rate": mean("tool_match"),
        "calls_per_task": mean("calls"),
        "samples_per_task": mean("samples"),
        "tokens_per_task": round(statistics.fmean(r["input_tokens"] + r["output_tokens"] for r in records), 1),
        "seconds_per_task": mean("seconds"),
        "errors": sum(1 for r in records if "error" in r),
    }


Allowed = TypeVar("Allowed", bound=str)


def _one_of(value: str, allowed: tuple[Allowed, ...], option: str) -> Allowed:
    """``value`` as the one of ``allowed`` it equals; an unknown one is an InputError naming the ``option``."""
    for choice in allowed:
        if value == choice:
            return choice
    raise InputError(f"{option} must be {' or '.join(repr(a) for a in allowed)}, got '{value}'.")


def _finished(out: Path, agent: str, model: str, task_ids: set[str]) -> list[dict[str, Any]]:
    """Records a killed run already wrote for these tasks (a rerun with the same --out resumes)."""
    if not out.exists():
        return []
    records = []
    for line in out.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut off by the kill
            continue
        if record.get("agent") == agent and record.get("model") == model and record.get("task") in task_ids:
            records.append(record)
    return records


def run_bench(
    agent: str,
    model: str,
    settings: ToolAgentSettings,
    *,
    tasks: int,
    out: Path,
    min_steps: int = 10,
    candidates: int = 8,
    on_task: Callable[[dict[str, Any], int, int], None] | None = None,
) -> dict[str, Any]:
    """Generate ``tasks`` ToolWorld tasks from ``settings.seed``, run ``agent`` on each, write records and summary.
    Records already in ``out`` for the same agent, model and tasks are kept and their tasks skipped.
    ``on_task(record, done, total)`` is called after each task that runs."""
    # Start-up: `metaharness --help` imports this module for its choices; the world loads when it runs.
    from metaharness.agents.environments.toolworld import ToolWorld
    from metaharness.models import connect

    if agent not in AGENTS:
        raise InputError(f"Unknown agent '{agent}': use one of {', '.join(AGENTS)}.")
    if tasks < 1:
        raise InputError("--tasks must be at least 1.")
    client = connect(model)
    seed = settings.seed
    world_tasks = ToolWorld(seed=seed).generate_tasks(tasks, seed=seed, min_steps=min_steps, candidates=candidates)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = _finished(out, agent, model, {t.id for t in world_tasks})
    done = {r["task"] for r in records}
    with out.open("a") as handle:
        for task in (t for t in world_tasks if t.id not in done):
            record = run_task(agent, task, client, settings)
            records.append(record)
            handle.write(json.dumps(record, default=str) + "\n")
            handle.flush()
            if on_task is not None:
                on_task(record, len(records), len(world_tasks))
    summary = {
        "agent": agent,
        "model": model,
        **asdict(settings),
        "min_steps": min_steps,
        "candidates": candidates,
        **summarize(records),
    }
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
