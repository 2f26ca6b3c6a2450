"""Entropy-guided branching (EGB, arXiv 2604.12126): execute a long tool plan, then branch where the model was
least sure.

Phase 1 follows the plan step by step. At each step a ``ToolChooser`` votes over the step's candidate tools,
either black-box (``m`` sampled choices; the vote shares are the distribution) or white-box (the token
log-probabilities of the tool name, see ``distribution_from_logprobs``). The majority tool is executed and the
entropy of the vote is recorded. Arguments are constrained to values already known (the task's inputs and earlier
results) that satisfy the tool's JSON schema; the chooser is asked only when more than one value fits.

Phase 2 runs when the final result fails verification (a mismatch with the reference, or a verifier's rejection).
Branch points are taken highest entropy first (ties: the earlier step, then the better-voted alternative): the
runner-up tool from the vote is substituted at that step, and every downstream step is executed again with the new
observations. Downstream tool choices are either voted again (``downstream="revote"``: the model sees the new
observations) or taken from the parent trajectory's votes (``downstream="reuse"``: only the tools and the argument
fills run again, so a branch costs almost no samples). Either way the downstream steps' runner-ups join the queue,
so a plan with two wrong steps is repaired by a branch of a branch. At most ``branch_budget`` branches run; the
first verified trajectory is the answer, otherwise the phase-1 trajectory stands.

    >>> from metaharness.agents.branching import entropy
    >>> round(entropy({"a": 0.5, "b": 0.5}), 3)
    1.0
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import jsonschema

from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.protocol import TokenLogprob, Tool, Usage

BranchOrder = Literal["entropy", "random"]
Downstream = Literal["revote", "reuse"]


class PlanEnvironment(Protocol):
    """A plan to execute over a tool library (e.g. ``metaharness.agents.environments.toolworld.ToolTask``).

    ``instructions`` are the plan's steps in words; ``constants`` the values known before any step, as
    (label, value); ``candidates(i)`` the tools offered at step ``i`` (retrieved, a short list); ``execute`` runs a
    tool and returns its observation (errors are observations such as ``{"error": ...}``, never exceptions);
    ``verify`` says whether a final observation is acceptable.
    """

    goal: str

    @property
    def instructions(self) -> list[str]: ...

    @property
    def constants(self) -> list[tuple[str, JSONValue]]: ...

    def candidates(self, index: int) -> list[Tool]: ...

    def execute(self, index: int, tool: str, arguments: JSONObject) -> JSONValue: ...

    def verify(self, final: JSONValue) -> bool: ...


def entropy(probs: dict[str, float]) -> float:
    """Shannon entropy in bits of a distribution over tool names (zero-probability entries ignored)."""
    return 0.0 - sum(p * math.log2(p) for p in probs.values() if p > 0)  # 0.0 - ...: no "-0.0" for one-hots


@dataclass
class Vote:
    """A chooser's estimate over the candidate tools at one step.

    ``probs`` maps tool names to probabilities; ``order`` is the candidate order used to break ties (earlier
    first). ``counts`` holds the raw votes of a black-box estimate (``None`` for white-box).
    """

    probs: dict[str, float]
    method: str
    order: tuple[str, ...] = ()
    counts: dict[str, int] | None = None

    @property
    def ranking(self) -> list[str]:
        """Tools with positive probability, most likely first; ties keep the candidate order."""
        position = {name: i for i, name in enumerate(self.order)}
        named = [n for n, p in self.probs.items() if p > 0]
        return sorted(named, key=lambda n: (-self.probs[n], position.get(n, len(position))))

    @property
    def choice(self) -> str:
        return self.ranking[0]

    @property
    def entropy(self) -> float:
        return entropy(self.probs)

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "method": self.method,
            "probs": {n: round(self.probs[n], 4) for n in self.ranking},
            "entropy": round(self.entropy, 4),
        }
        if self.counts is not None:
            out["counts"] = {n: c for n, c in self.counts.items()}
        return out


def vote_from_samples(choices: Sequence[str], candidates: Sequence[str]) -> Vote:
    """Black-box estimate: the vote shares of ``m`` sampled tool choices."""
    if not choices:
        raise ValueError("a vote needs at least one sampled choice")
    counts = Counter(choices)
    return Vote({n: c / len(choices) for n, c in counts.items()}, "sample", tuple(candidates), dict(counts))


def distribution_from_logprobs(
    text: str, tokens: Sequence[TokenLogprob], candidates: Sequence[str], start: int, terminator: str = '"'
) -> dict[str, float]:
    """White-box estimate: the probability of each candidate name from the generated tokens' top alternatives.

    ``text`` is the generated output, equal to the concatenated ``tokens``; the chosen name begins at character
    ``start`` and ends before ``terminator``. Walking the tokens, a candidate leaves the generated path at the first
    token that is not a prefix of (or does not extend) ``text[:start] + candidate + terminator``; its probability is
    the path's probability up to there times the probability of the alternatives at that position that stay on its
    way (the rest of its spelling is taken as certain, as under an enum constraint). The generated name gets the
    probability of its whole path. Candidates that never appear among the alternatives get 0. The result is
    renormalised over the candidates, since a constrained decoder can produce nothing else.
    """
    if "".join(t.token for t in tokens) != text:
        raise ValueError("the tokens do not spell the generated text")
    targets = {c: text[:start] + c + terminator for c in candidates}

    def compatible(prefix: str, target: str) -> bool:
        return prefix.startswith(target) or target.startswith(prefix)

    alive = set(candidates)
    mass: dict[str, float] = {}
    path, position = 0.0, 0
    for token in tokens:
        before, position = position, position + len(token.token)
        if position <= start:
            continue
        stay = {c for c in alive if compatible(text[:position], targets[c])}
        for c in alive - stay:
            options = [lp for alt, lp in token.top if compatible(text[:before] + alt, targets[c])]
            if options:
                mass[c] = path + math.log(sum(math.exp(lp) for lp in options))
        alive = stay
        path += token.logprob
        if not alive or any(position >= len(targets[c]) for c in alive):
            break
    for c in alive:
        if position >= len(targets[c]):
            mass[c] = path
    if not mass:
        raise ValueError("the generated text names none of the candidates")
    top = max(mass.values())
    weights = {c: math.exp(lp - top) for c, lp in mass.items()}
    total = sum(weights.values())
    return {c: weights.get(c, 0.0) / total for c in candidates}


@dataclass
class Meter:
    """Model usage of one task: requests, sampled choices, tokens. ``cap`` bounds ``samples`` (None: no cap);
    the executor checks it before each vote assuming the vote costs the ``samples`` it asks for."""

    calls: int = 0
    samples: int = 0
    usage: Usage = field(default_factory=Usage)
    cap: int | None = None

    def affords(self, samples: int) -> bool:
        return self.cap is None or self.samples + samples <= self.cap

    def add(self, samples: int, usage: Usage | None = None, calls: int = 1) -> None:
        self.calls += calls
        self.samples += samples
        if usage is not None:
            self.usage = self.usage + usage

    def to_dict(self) -> JSONObject:
        return {
            "calls": self.calls,
            "samples": self.samples,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
        }


@dataclass
class StepRecord:
    """One executed step: the vote, the executed tool and arguments, the observation."""

    index: int
    tool: str
    arguments: JSONObject
    observation: JSONValue
    vote: Vote
    # "voted": the vote's choice; "substituted": a branch put a runner-up here; "reused": a parent's vote
    origin: str = "voted"

    def to_dict(self) -> JSONObject:
        return {
            "step": self.index + 1,
            "tool": self.tool,
            "arguments": self.arguments,
            "observation": self.observation,
            "vote": self.vote.to_dict(),
            "origin": self.origin,
        }


@dataclass
class StepView:
    """What a chooser sees at one step."""

    goal: str
    instructions: list[str]
    index: int
    candidates: list[Tool]
    history: list[StepRecord]
    known: list[tuple[str, JSONValue]]
    notes: list[str] = field(default_factory=list)

    @property
    def instruction(self) -> str:
        return self.instructions[self.index]


class ToolChooser(Protocol):
    """Chooses tools and, when several known values fit, arguments. It charges every model call to ``meter``.

    ``vote`` returns a ``Vote`` over ``view.candidates`` (``samples`` sampled choices for a black-box chooser;
    a white-box chooser may ignore it). ``fill`` returns one value per parameter of ``options`` (each list is
    non-empty), each taken from its list.
    """

    meter: Meter

    def vote(self, view: StepView, samples: int) -> Vote: ...

    def fill(self, view: StepView, tool: Tool, options: dict[str, list[JSONValue]]) -> JSONObject: ...


@dataclass
class Trajectory:
    """An execution of the plan; ``complete`` is False when the budget ran out before the last step."""

    steps: list[StepRecord]
    complete: bool = True
    parent: int | None = None
    branch_step: int | None = None

    @property
    def final(self) -> JSONValue:
        return self.steps[-1].observation if self.complete and self.steps else None

    @property
    def tools(self) -> list[str]:
        return [s.tool for s in self.steps]

    def to_dict(self) -> JSONObject:
        return {
            "complete": self.complete,
            "parent": self.parent,
            "branch_step": None if self.branch_step is None else self.branch_step + 1,
            "final": self.final,
            "steps": [s.to_dict() for s in self.steps],
        }


@functools.lru_cache(maxsize=65536, typed=True)
def _fits(schema: str, value: JSONValue) -> bool:
    """Whether a scalar value satisfies a parameter schema (cached: plans ask the same questions many times)."""
    return jsonschema.Draft202012Validator(json.loads(schema)).is_valid(value)


def argument_options(tool: Tool, known: Sequence[tuple[str, JSONValue]]) -> dict[str, list[JSONValue]]:
    """Per parameter, the values the call may use: the schema's enum, or the known values that satisfy the
    parameter's schema, most recent first (duplicates removed)."""
    options: dict[str, list[JSONValue]] = {}
    for name, schema in tool.parameters.get("properties", {}).items():
        if "enum" in schema:
            options[name] = list(schema["enum"])
            continue
        key = json.dumps(schema, sort_keys=True)
        found: list[JSONValue] = []
        for _, value in reversed(known):
            if not isinstance(value, dict | list) and value not in found and _fits(key, value):
                found.append(value)
        options[name] = found
    return options


def _known(env: PlanEnvironment, steps: Sequence[StepRecord]) -> list[tuple[str, JSONValue]]:
    return list(env.constants) + [(f"step {s.index + 1} result", s.observation) for s in steps]


def execute_plan(
    env: PlanEnvironment,
    chooser: ToolChooser,
    samples: int,
    *,
    prefix: Sequence[StepRecord] = (),
    substitute: tuple[str, Vote] | None = None,
    reuse: Sequence[StepRecord] = (),
    notes: Sequence[str] = (),
) -> Trajectory:
    """Run the plan from step ``len(prefix)`` on, executing each step's majority tool.

    With ``substitute = (tool, vote)`` the first new step executes ``tool`` instead of voting (a phase-2 branch
    keeps the vote it branched from). Steps that ``reuse`` covers (a parent trajectory's records, by index) take
    the parent's vote instead of asking the chooser. Stops early with ``complete=False`` when the meter's cap is
    reached.
    """
    steps = list(prefix)
    for index in range(len(prefix), len(env.instructions)):
        candidates = env.candidates(index)
        view = StepView(env.goal, env.instructions, index, candidates, list(steps), _known(env, steps), list(notes))
        origin = "voted"
        if substitute is not None and index == len(prefix):
            (tool_name, vote), origin = substitute, "substituted"
        elif index < len(reuse):
            vote, origin = reuse[index].vote, "reused"
            tool_name = vote.choice
        else:
            if not chooser.meter.affords(samples):
                return Trajectory(steps, complete=False)
            vote = chooser.vote(view, samples)
            tool_name = vote.choice
        tool = next((t for t in candidates if t.name == tool_name), None)
        arguments: JSONObject = {}
        if tool is not None:
            # a parameter nothing fits is left out: the tool then answers with an error observation
            options = {name: values for name, values in argument_options(tool, view.known).items() if values}
            if all(len(values) == 1 for values in options.values()):
                arguments = {name: values[0] for name, values in options.items()}
            elif chooser.meter.affords(1):
                arguments = chooser.fill(view, tool, options)
            else:
                return Trajectory(steps, complete=False)
        steps.append(StepRecord(index, tool_name, arguments, env.execute(index, tool_name, arguments), vote, origin))
    return Trajectory(steps)


@dataclass
class ExecutionResult:
    """What an executor returns: the answer trajectory, whether it verified, and everything explored."""

    answer: Trajectory
    verified: bool
    trajectories: list[Trajectory]
    branches: int
    meter: Meter

    def to_dict(self) -> JSONObject:
        return {
            "verified": self.verified,
            "branches": self.branches,
            "final": self.answer.final,
            "tools": [name for name in self.answer.tools],
            "usage": self.meter.to_dict(),
            "trajectories": [t.to_dict() for t in self.trajectories],
        }


@dataclass(order=True)
class _Branch:
    priority: tuple
    trajectory: int = field(compare=False)
    step: int = field(compare=False)
    tool: str = field(compare=False)


def run_egb(
    env: PlanEnvironment,
    chooser: ToolChooser,
    *,
    samples: int = 5,
    branch_budget: int = 3,
    order: BranchOrder = "entropy",
    downstream: Downstream = "reuse",
    seed: int = 0,
) -> ExecutionResult:
    """Phase 1 (majority execution), then phase 2 (branching) while the result fails ``env.verify``.

    ``branch_budget = 0`` is plain majority-vote execution. ``order="random"`` takes the same branch points in a
    seeded random order: the control that shows what the entropy ordering is worth.
    """
    if samples < 1 or branch_budget < 0:
        raise ValueError("samples must be >= 1 and branch_budget >= 0")
    rng = random.Random(seed)
    base = execute_plan(env, chooser, samples)
    explored = [base]
    if base.complete and env.verify(base.final):
        return ExecutionResult(base, True, explored, 0, chooser.meter)
    queue: list[_Branch] = []
    tried: set[str] = set()

    def enqueue(t: int, first: int) -> None:
        for record in explored[t].steps[first:]:
            if record.origin == "substituted":
                continue
            for rank, alternative in enumerate(record.vote.ranking[1:], start=1):
                key = (-round(record.vote.entropy, 9), record.index, rank, t) if order == "entropy" else (rng.random(),)
                heapq.heappush(queue, _Branch(key, t, record.index, alternative))

    enqueue(0, 0)
    branches = 0
    while queue and branches < branch_budget:
        branch = heapq.heappop(queue)
        parent = explored[branch.trajectory]
        prefix = parent.steps[: branch.step]
        signature = json.dumps([[s.tool, s.arguments] for s in prefix] + [branch.tool], sort_keys=True, default=str)
        if signature in tried:
            continue
        tried.add(signature)
        vote = parent.steps[branch.step].vote
        trajectory = execute_plan(
            env,
            chooser,
            samples,
            prefix=prefix,
            substitute=(branch.tool, vote),
            reuse=parent.steps if downstream == "reuse" else (),
        )
        trajectory.parent, trajectory.branch_step = branch.trajectory, branch.step
        explored.append(trajectory)
        branches += 1
        if not trajectory.complete:
            break
        if env.verify(trajectory.final):
            return ExecutionResult(trajectory, True, explored, branches, chooser.meter)
        enqueue(len(explored) - 1, branch.step + 1)
    return ExecutionResult(base, False, explored, branches, chooser.meter)
