"""Running a puzzle benchmark: build the agent, play the fixed instances, write JSONL, summarise.

``run_bench`` plays every selected instance once with budget B = T* + slack, appends one JSON line per episode
to ``out`` as it goes, and skips episodes the file already holds for the same configuration, so a killed run
resumes where it stopped. ``summary_table`` aggregates per bin: success rate, actions used / budget, first
irrecoverable action, planning and sampling error rates, planning calls and tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from metaharness.agents.environments.puzzle import PuzzleEnv
from metaharness.agents.environments.puzzle_instances import PuzzleInstance, load_instance_set, make_env
from metaharness.agents.puzzle_baselines import GreedyAgent, RandomAgent
from metaharness.agents.puzzle_episode import EpisodeRecord, PuzzleAgent, run_episode
from metaharness.agents.puzzle_plan_act import PlanActAgent
from metaharness.agents.puzzle_planning import PuzzlePlanner
from metaharness.agents.puzzle_react import ReActAgent
from metaharness.agents.puzzle_react_tps import TPSAgent
from metaharness.agents.puzzle_tape import TapeAgent
from metaharness.errors import InputError
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ModelClient

if TYPE_CHECKING:
    from rich.table import Table

AGENTS = ("react", "plan-act", "tps", "tape", "random", "greedy")
MODEL_FREE = ("random", "greedy")


@dataclass(frozen=True)
class AgentSettings:
    """What shapes an agent besides its model: the TPS stages (``oracle`` subagents, ``m`` plans, ``epsilon`` of
    the model-free sampler), the ``seed``, ``free_text`` answers of ReAct-style agents (the seeds'
    ``Thought:``/``Action:`` text instead of JSON) and the ``temperature`` of the model's plan sampling."""

    oracle: bool = False
    m: int = 4
    epsilon: float = 0.3
    seed: int = 0
    free_text: bool = False
    temperature: float = 0.0


def build_agent(
    name: str, env: PuzzleEnv, *, model: ModelClient | None, settings: AgentSettings | None = None
) -> PuzzleAgent:
    """An agent by benchmark name; model-based agents need ``model`` (TAPE with oracle subagents does not)."""
    settings = settings or AgentSettings()
    if name not in AGENTS:
        raise InputError(f"Unknown agent {name!r}; use one of {', '.join(AGENTS)}.")
    if name == "random":
        return RandomAgent(settings.seed)
    if name == "greedy":
        return GreedyAgent(settings.seed)
    if name == "tape" and (model is not None or settings.oracle):
        return TapeAgent(_planner(env, model, settings), model)
    if model is None:
        raise InputError(
            f"The {name} agent needs --model SPEC (e.g. local:smollm2-135m); only random, greedy and "
            f"tape with --oracle-subagents run without a model."
        )
    if name == "react":
        return ReActAgent(model, free_text=settings.free_text)
    if name == "plan-act":
        return PlanActAgent(model, free_text=settings.free_text)
    return TPSAgent(model, _planner(env, model, settings), free_text=settings.free_text)


def _planner(env: PuzzleEnv, model: ModelClient | None, settings: AgentSettings) -> PuzzlePlanner:
    return PuzzlePlanner(
        env,
        model=model,
        oracle=settings.oracle,
        m=settings.m,
        epsilon=settings.epsilon,
        seed=settings.seed,
        temperature=settings.temperature,
    )


def _config(agent: str, model: ModelClient | None, slack: int, settings: AgentSettings) -> dict[str, Any]:
    """What identifies an episode's configuration in its row (a rerun skips the episodes it finds)."""
    uses_sampler_noise = model is None and agent == "tape"
    return {
        "agent": agent,
        "model": model.spec if model else None,
        "slack": slack,
        "oracle_subagents": settings.oracle,
        "m": settings.m,
        "epsilon": settings.epsilon if uses_sampler_noise else None,
        "free_text": settings.free_text,
        "temperature": settings.temperature,
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


def _tokens(ledger: Ledger | None) -> tuple[int, int]:
    """Input and output tokens spent so far (none without a ledger)."""
    if ledger is None:
        return 0, 0
    totals = ledger.totals()
    return totals["input_tokens"], totals["output_tokens"]


def run_bench(
    instance_set: str,
    *,
    agent: str,
    model: ModelClient | None = None,
    slack: int = 2,
    episodes: int | None = None,
    bins: list[str] | None = None,
    settings: AgentSettings | None = None,
    out: Path | None = None,
    on_episode: Callable[[PuzzleInstance, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Play ``episodes`` instances per bin (all when ``None``) and return every episode row, resumed ones included.

    ``settings`` shape the agent (default ``AgentSettings``); rows already in ``out`` for the same
    configuration are kept and their episodes skipped."""
    if slack < 0:
        raise InputError(f"--slack must be >= 0 (the budget is T* + slack); got {slack}.")
    chosen = load_instance_set(instance_set).select(bins, episodes)
    settings = settings or AgentSettings()
    config = _config(agent, model, slack, settings)
    done = _done(out, config)
    # Episode tokens are read off the client's ledger, where it has one (connect()'s clients do).
    ledger: Ledger | None = getattr(model, "ledger", None)
    rows = []
    for instance in chosen:
        if instance.id in done:
            rows.append(done[instance.id])
            if on_episode:
                on_episode(instance, done[instance.id])
            continue
        env = make_env(instance)
        player = build_agent(agent, env, model=model, settings=settings)
        before = _tokens(ledger)
        record: EpisodeRecord = run_episode(
            env, player, slack=slack, instance=instance.id, bin=instance.bin, model=config["model"]
        )
        after = _tokens(ledger)
        record.input_tokens, record.output_tokens = after[0] - before[0], after[1] - before[1]
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


def summary_table(rows: list[dict[str, Any]], title: str) -> Table:
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
