"""Running a puzzle benchmark: build the agent, play the fixed instances, write JSONL, summarise.

``run_bench`` plays every selected instance once with budget B = T* + slack, appends one JSON line per episode
to ``out`` as it goes, and skips episodes the file already holds for the same configuration, so a killed run
resumes where it stopped. ``summary_table`` aggregates per bin: success rate, actions used / budget, first
irrecoverable action, planning and sampling error rates, planning calls and tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metaharness.agents.puzzle_baselines import GreedyAgent, RandomAgent
from metaharness.agents.puzzle_episode import EpisodeRecord, PuzzleAgent, run_episode
from metaharness.agents.puzzle_plan_act import PlanActAgent
from metaharness.agents.puzzle_planning import PuzzlePlanner
from metaharness.agents.puzzle_react import ReActAgent
from metaharness.agents.puzzle_react_tps import TPSAgent
from metaharness.agents.puzzle_tape import TapeAgent
from metaharness.errors import InputError
from metaharness.models.types import ModelClient
from metaharness.tasks.environments.puzzle import PuzzleEnv
from metaharness.tasks.environments.puzzle_instances import PuzzleInstance, load_instance_set, make_env

AGENTS = ("react", "plan-act", "tps", "tape", "random", "greedy")
MODEL_FREE = ("random", "greedy")


def build_agent(
    name: str,
    env: PuzzleEnv,
    *,
    model: ModelClient | None,
    oracle: bool = False,
    m: int = 4,
    epsilon: float = 0.3,
    seed: int = 0,
    free_text: bool = False,
    temperature: float = 0.0,
) -> PuzzleAgent:
    """An agent by benchmark name; model-based agents need ``model`` (TAPE with oracle subagents does not).
    ``free_text``: ReAct-style agents answer in the seeds' ``Thought:``/``Action:`` text instead of JSON;
    ``temperature``: of the model's plan sampling (tps, tape)."""
    if name not in AGENTS:
        raise InputError(f"Unknown agent {name!r}; use one of {', '.join(AGENTS)}.")
    if name == "random":
        return RandomAgent(seed)
    if name == "greedy":
        return GreedyAgent(seed)
    if model is None and not (name == "tape" and oracle):
        raise InputError(
            f"The {name} agent needs --model SPEC (e.g. local:smollm2-135m); only random, greedy and "
            f"tape with --oracle-subagents run without a model."
        )
    if name == "react":
        return ReActAgent(model, free_text=free_text)
    if name == "plan-act":
        return PlanActAgent(model, free_text=free_text)
    planner = PuzzlePlanner(env, model=model, oracle=oracle, m=m, epsilon=epsilon, seed=seed, temperature=temperature)
    return TPSAgent(model, planner, free_text=free_text) if name == "tps" else TapeAgent(planner, model)


def _config(
    agent: str,
    model: str | None,
    slack: int,
    oracle: bool,
    m: int,
    epsilon: float | None,
    free_text: bool,
    temperature: float,
) -> dict[str, Any]:
    return {
        "agent": agent,
        "model": model,
        "slack": slack,
        "oracle_subagents": oracle,
        "m": m,
        "epsilon": epsilon,
        "free_text": free_text,
        "temperature": temperature,
    }


def _done(out: Path | None, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Episodes already in ``out`` for this configuration, by instance id."""
    if out is None or not out.exists():
        return {}
    found = {}
    for line in out.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if all(row.get(k) == v for k, v in config.items()):
                found[row["instance"]] = row
    return found


def run_bench(
    instance_set: str,
    *,
    agent: str,
    model: ModelClient | None = None,
    slack: int = 2,
    episodes: int | None = None,
    bins: list[str] | None = None,
    oracle: bool = False,
    m: int = 4,
    epsilon: float = 0.3,
    seed: int = 0,
    free_text: bool = False,
    temperature: float = 0.0,
    out: Path | None = None,
    on_episode: Callable[[PuzzleInstance, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Play ``episodes`` instances per bin (all when ``None``) and return every episode row, resumed ones included."""
    if slack < 0:
        raise InputError(f"--slack must be >= 0 (the budget is T* + slack); got {slack}.")
    chosen = load_instance_set(instance_set).select(bins, episodes)
    uses_sampler_noise = model is None and agent == "tape"
    config = _config(
        agent,
        model.spec if model else None,
        slack,
        oracle,
        m,
        epsilon if uses_sampler_noise else None,
        free_text,
        temperature,
    )
    done = _done(out, config)
    rows = []
    for instance in chosen:
        if instance.id in done:
            rows.append(done[instance.id])
            if on_episode:
                on_episode(instance, done[instance.id])
            continue
        env = make_env(instance)
        player = build_agent(
            agent,
            env,
            model=model,
            oracle=oracle,
            m=m,
            epsilon=epsilon,
            seed=seed,
            free_text=free_text,
            temperature=temperature,
        )
        before = model.ledger.totals() if model is not None and hasattr(model, "ledger") else None
        record: EpisodeRecord = run_episode(
            env, player, slack=slack, instance=instance.id, bin=instance.bin, model=config["model"]
        )
        if before is not None:
            after = model.ledger.totals()
            record.input_tokens = after["input_tokens"] - before["input_tokens"]
            record.output_tokens = after["output_tokens"] - before["output_tokens"]
        row = {"set": instance_set, **config, **record.to_json()}
        rows.append(row)
        if out is not None:
            with out.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
        if on_episode:
            on_episode(instance, row)
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-bin aggregates (and an ``all`` line) of episode rows."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["bin"], []).append(row)
    if len(groups) > 1:
        groups["all"] = list(rows)
    lines = []
    for name, group in groups.items():
        n = len(group)
        irrecoverable = [r["first_irrecoverable"] for r in group if r["first_irrecoverable"] is not None]
        judged = sum(r["planning_judged"] for r in group)
        steps = sum(r["actions_used"] for r in group)
        lines.append(
            {
                "bin": name,
                "episodes": n,
                "success": sum(r["success"] for r in group) / n,
                "budget_used": sum(r["budget_used"] for r in group) / n,
                "irrecoverable": len(irrecoverable) / n,
                "first_irrecoverable": sum(irrecoverable) / len(irrecoverable) if irrecoverable else None,
                "planning_error": sum(r["planning_errors"] for r in group) / judged if judged else None,
                "sampling_error": sum(r["sampling_errors"] for r in group) / steps if steps else None,
                "plan_calls": sum(r["plan_calls"] for r in group) / n,
                "tokens": sum(r["input_tokens"] + r["output_tokens"] for r in group) / n,
            }
        )
    return lines


def summary_table(rows: list[dict[str, Any]], title: str):
    from rich.table import Table

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    table = Table(title=title)
    for column in (
        "bin",
        "episodes",
        "success",
        "actions/budget",
        "irrecoverable",
        "first irrec. step",
        "planning err",
        "sampling err",
        "plan calls",
        "tokens/ep",
    ):
        table.add_column(column, justify="left" if column == "bin" else "right")
    for s in summarise(rows):
        table.add_row(
            s["bin"],
            str(s["episodes"]),
            pct(s["success"]),
            pct(s["budget_used"]),
            pct(s["irrecoverable"]),
            "-" if s["first_irrecoverable"] is None else f"{s['first_irrecoverable']:.1f}",
            pct(s["planning_error"]),
            pct(s["sampling_error"]),
            f"{s['plan_calls']:.1f}",
            f"{s['tokens']:.0f}",
        )
    return table
