"""``tps``: the coding proposer that plans in program space before it writes code.

Every iteration is a round of TPS's four stages over the run's lasting program graph (``RunState.graph``), on the
planner's stage protocols (``metaharness.planner.expand.grow``), with the proposer model behind the first two
(stage prompts and JSON schemas asked through ``metaharness.planner.asking.ask_json``, which re-asks on
malformed JSON):

1. sampling (``RevisionSampler``): ``M`` revision plans of one or two revisions in words, each setting out from
   an evaluated candidate or from a predicted one still in the graph (an extension of an earlier prediction);
2. simulation (``BehaviourSimulator``): the frontier candidates run on a few held-out training examples with
   the task model (their real behaviour, ``.probe``); for every revision the model predicts which of those
   examples the revised harness gets right, what implementing it costs (tokens) and its prompt size; a second
   revision is simulated from the first one's predicted behaviour;
3. merging by behaviour: revisions of the same base predicted to behave the same on every probe example share a
   node (the planner's key merger);
4. labels: +1 predicted to beat the best measured score, -1 when the model predicts the revision breaks the
   harness, 0 otherwise.

Both stages see what the Meta-Harness proposer sees (``.evidence``): whole source files within a token budget,
per-example validation traces with the prompts the harness sent and the model's answers, and failed attempts with
their errors. The planner's selection then picks what to implement and evaluate over the whole graph within the
iteration's budget (task-model tokens and dollars of evaluation, plus the priced implementation tokens), and the
coding agent implements exactly those chains, each step as its own candidate. When planning produces nothing
usable (a weak model), the agent falls back to the ``coding`` proposer's behaviour and says so in the record.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, TypedDict

from metaharness.candidate import Candidate
from metaharness.json_types import JSONObject
from metaharness.models.prices import FREE
from metaharness.models.protocol import ModelClient, Usage
from metaharness.planner.asking import Attempt, ask_json
from metaharness.planner.graph import Node, NodeId, PlanGraph
from metaharness.planner.program import PREDICTED, depth, nodes_with
from metaharness.planner.result import PlanResult, PlanResultJSON
from metaharness.planner.subagents import CandidatePlan, PlanningTask, SimulatedStep
from metaharness.planner.subagents.stage_io import StageRecord
from metaharness.proposers.coding import CodingProposer, submitted, to_proposal
from metaharness.proposers.evidence import failed_attempts, records_within, sources_within, trace_excerpts
from metaharness.proposers.offline import task_model_price
from metaharness.proposers.probe import PredictionBudgetSpent, ProbeResult
from metaharness.proposers.program_search import (
    MIN_STD,
    GainCalibration,
    base_of,
    choose,
    grow_round,
    predicted_score,
    proposals,
    recalibrated_graph,
)
from metaharness.proposers.workspace import summary_table
from metaharness.search.protocol import Proposal, RunState
from metaharness.tasks.protocol import Example, Task

SAMPLING = """You are the plan-sampling subagent of a harness optimiser. A harness is the Python program around a
fixed task model. From the candidates below (and the predicted revisions not yet written), propose {plans} different
revision plans. Each plan names a start (an existing candidate id, or a predicted revision's id to extend it) and
lists one or two revisions, each one concrete sentence a programmer can implement (what to change in the code and
why). Read the traces: fix what makes examples fail. Mix small fixes of the best with different ideas. Never
propose hard-coding dataset answers. Reply with JSON only."""

SIMULATION = """You are the state-simulation subagent of a harness optimiser. You are shown a harness, a revision of
it, its validation traces and how it currently behaves on {n} training examples. Predict, for each example in
order, whether the revised harness answers it correctly; estimate how many tokens implementing the revision costs,
the prompt tokens per example after it, and whether the revision is likely to break the harness. Reply with JSON
only."""

SAMPLER_TOKENS = 12_000  # evidence shown to the sampler (sources, traces, failures), at most a third of the window
SIMULATOR_TOKENS = 6_000  # evidence shown to the simulator per revision


class PlanningRecord(TypedDict, total=False):
    """An iteration's ``planning.json``: the stages over the run's graph, the nodes they added, the selection, and
    why the agent fell back to the coding proposer's way (``fallback``) when it did."""

    iteration: int
    stages: list[StageRecord]
    added: list[NodeId]
    selection: PlanResultJSON | None
    fallback: str


class SamplerCall(TypedDict):
    attempts: list[Attempt]


class SimulatorCall(TypedDict):
    start: str
    revisions: list[str]
    attempts: list[Attempt]


class Behaviour(TypedDict):
    """The simulator's answer (``_simulation_schema``, which ``ask_json`` has checked it against)."""

    correct: list[bool]
    implementation_tokens: int
    context_tokens: int
    breaks_harness: bool


def _sampling_schema(plans: int, starts: list[str]) -> JSONObject:
    plan: JSONObject = {
        "type": "object",
        "properties": {
            "start": {"type": "string", "enum": [s for s in starts]},
            "revisions": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
        },
        "required": ["start", "revisions"],
    }
    return {
        "type": "object",
        "properties": {"plans": {"type": "array", "minItems": 1, "maxItems": plans, "items": plan}},
        "required": ["plans"],
    }


def _simulation_schema(n: int) -> JSONObject:
    return {
        "type": "object",
        "properties": {
            "correct": {"type": "array", "minItems": n, "maxItems": n, "items": {"type": "boolean"}},
            "implementation_tokens": {"type": "integer", "minimum": 0},
            "context_tokens": {"type": "integer", "minimum": 0},
            "breaks_harness": {"type": "boolean"},
        },
        "required": ["correct", "implementation_tokens", "context_tokens", "breaks_harness"],
    }


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip())


class TPSProposer(CodingProposer):
    """The ``tps`` proposer (and, with a baseline ``selection``, its greedy / random / best-of-N variants)."""

    def __init__(
        self,
        model: ModelClient | str,
        task: Task,
        task_model: ModelClient | str | None = None,
        *,
        selection: str = "auto",
        plans: int = 4,
        depth: int = 3,
        probe_size: int = 6,
        **agent: Any,
    ) -> None:
        """``agent``: the coding agent's settings (``CodingProposer``)."""
        super().__init__(model, task, task_model, probe_size=probe_size, **agent)
        self.selection = selection
        self.plans = plans
        self.depth = max(1, depth)
        baseline = selection in ("greedy", "random", "best_of_n")
        self.name = f"tps-{selection.replace('_', '-')}" if baseline else "tps"
        self.task_price = task_model_price(task_model) if task_model is not None else FREE
        self.proposer_price = task_model_price(self.model)

    def evidence_tokens(self, share: int) -> int:
        return min(share, (self.context_tokens or 32_768) // 3)

    def planning(self, state: RunState) -> tuple[PlanResult | None, PlanningRecord]:
        """Stages 1-4 over the run's graph, then the selection; returns it (None: nothing to choose) and the record
        of every stage."""
        record: PlanningRecord = {"iteration": state.iteration}
        if not state.supported() or self.prober is None:
            return None, record
        graph, calibration = recalibrated_graph(state)
        growth = grow_round(
            state,
            graph,
            sampler=RevisionSampler(self, graph, state),
            simulator=BehaviourSimulator(self, graph, state, calibration),
            plans=self.plans,
            depth_limit=self.depth,
        )
        record["stages"] = growth.stages
        record["added"] = growth.added
        result = choose(state, graph, self.selection, seed=state.iteration)
        record["selection"] = result.to_json() if result else None
        return (result if result is not None and result.evaluate else None), record

    def propose(self, state: RunState) -> list[Proposal]:
        if state.proposals < 1 or not state.candidates:
            return []
        if not state.predictions:  # the evaluation policy reads no prediction: write as the base agent does
            return super().propose(state)
        if self.prober is not None:
            self.prober.meter = state.predicting
        result, record = self.planning(state)
        workspace = self.workspace(state)
        path = workspace.root.parent / "planning.json"
        if result is None:
            record["fallback"] = "planning produced no usable candidate; the agent proposes as the coding proposer does"
            path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
            return super().propose(state)
        path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
        assert state.graph is not None  # planning made it
        chosen = proposals(state, state.graph, result)
        ready = [p for p in chosen if p.source]  # implemented candidates chosen as they are: nothing to write
        planned = [p for p in chosen if not p.source]
        lines, names = [], {}
        for rank, proposal in enumerate(planned):
            steps = [*proposal.intermediates, proposal]
            previous = proposal.parent or ""
            for j, step in enumerate(steps):
                name = f"plan{rank + 1}" if step is proposal else f"plan{rank + 1}-step{j + 1}"
                names[name] = step
                origin = f"candidate {previous}" if j == 0 else f"your new/{previous}"
                lines.append(
                    f"- new/{name}: copy {origin}, then implement: {step.summary} (submit with parent "
                    f"{proposal.parent})"
                )
                previous = name
        brief = (
            f"Iteration {state.iteration}. The planner chose these revisions; implement exactly these, one new "
            "candidate each, under the given names and in this order (a step builds on the one before it), then "
            + ("stop" if self.engine else "call finish")
            + ":\n"
            + "\n".join(lines)
        )
        if not planned:
            return ready[: state.proposals]
        self.write(state, workspace, brief, len(names))
        written = {s.name: s for s in submitted(workspace, len(names))}
        out = list(ready)
        for rank, proposal in enumerate(planned):
            final = written.get(f"plan{rank + 1}")
            if final is None or final.error is not None:
                if final is not None:
                    out.append(to_proposal(final))  # the loop records the failure and its error
                continue
            proposal.source = final.source
            proposal.hypothesis = final.hypothesis or proposal.hypothesis
            sources = [written.get(f"plan{rank + 1}-step{j + 1}") for j in range(len(proposal.intermediates))]
            if all(s is not None and s.error is None for s in sources):
                for step, submission in zip(proposal.intermediates, sources, strict=False):
                    step.source = submission.source if submission is not None else ""
            else:  # an intermediate was not written: the chain lands as one revision of its evaluated ancestor
                proposal.intermediates = []
                if proposal.prediction is not None:
                    kept = {**proposal.prediction.extra, "intermediates_not_written": True}
                    proposal.prediction = dataclasses.replace(proposal.prediction, extra=kept)
                    chain = kept.get("chain")
                    written_as = chain if isinstance(chain, list) else [proposal.summary]
                    proposal.summary = "; then ".join(map(str, written_as))
            out.append(proposal)
        extra = [to_proposal(s) for name, s in written.items() if name not in names]
        return (out + extra)[: state.proposals]


class RevisionSampler:
    """Stage 1 (``PlanSampler``) with the proposer model: plans that set out
    from the frontier or from predicted nodes still in the graph, with whole sources, traces and failed attempts."""

    def __init__(self, proposer: TPSProposer, graph: PlanGraph, state: RunState) -> None:
        self.proposer, self.graph, self.state = proposer, graph, state
        self.calls: list[SamplerCall] = []

    def take_calls(self) -> list[SamplerCall]:
        calls, self.calls = self.calls, []
        return calls

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        ranked = sorted(self.state.supported(), key=lambda c: -c.score)
        frontier = ranked[:3]
        budget = self.proposer.evidence_tokens(SAMPLER_TOKENS)
        predicted = [
            n
            for n in sorted(nodes_with(self.graph, PREDICTED), key=lambda n: -(n.score or 0.0))
            if not n.dead_end and depth(self.graph, n.id) < self.proposer.depth
        ][:8]
        listing = "\n".join(
            f"- {n.id}: revision of {next(iter(self.graph.nx.predecessors(n.id)), '?')}: {n.data.get('summary', '')} "
            f"(predicted score {n.score or 0.0:.3f} +- {n.std:.3f})"
            for n in predicted
        )
        parts = [
            summary_table(self.state),
            sources_within(ranked, budget // 2),
            trace_excerpts(self.state, frontier[0], token_budget=budget // 3),
            failed_attempts(self.state, budget // 6),
        ]
        if listing:
            parts.append("# Predicted revisions not yet written (you may extend one)\n" + listing)
        messages = [
            {"role": "system", "content": SAMPLING.format(plans=plans)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]
        starts = [c.id for c in frontier] + [str(n.id) for n in predicted]
        value, attempts = ask_json(
            self.proposer.model,
            messages,
            _sampling_schema(plans, starts),
            max_tokens=min(1024, self.proposer.max_tokens),
        )
        self.calls.append({"attempts": attempts})
        sampled: list[CandidatePlan] = []
        for entry in (value or {}).get("plans", []):
            revisions = tuple(_norm(r) for r in entry.get("revisions", []) if str(r).strip())
            if revisions and entry.get("start") in starts:
                sampled.append(CandidatePlan(revisions, start=entry["start"]))
        return sampled


class BehaviourSimulator:
    """Stage 2 (``StateSimulator``) with the proposer model: the revised
    harness's predicted correctness on the probe examples, from the start's real (evaluated) or predicted
    behaviour; the key is base and behaviour, so merging is by behaviour."""

    def __init__(self, proposer: TPSProposer, graph: PlanGraph, state: RunState, calibration: GainCalibration) -> None:
        self.proposer, self.graph, self.state, self.calibration = proposer, graph, state, calibration
        self.candidates = {c.id: c for c in state.candidates}
        self.calls: list[SimulatorCall] = []

    def take_calls(self) -> list[SimulatorCall]:
        calls, self.calls = self.calls, []
        return calls

    def simulate(self, task: PlanningTask, plan: CandidatePlan) -> list[SimulatedStep]:
        prober = self.proposer.prober
        start = self.graph.node(plan.start)  # type: ignore[arg-type]
        base = base_of(start, self.candidates)
        if prober is None or base is None:
            return []
        examples = prober.held_out.probe
        try:
            return self._simulate(start, base, examples, plan)
        except PredictionBudgetSpent:  # the iteration's predictions spent what they may: no more simulation
            return []

    def _simulate(
        self, start: Node, base: Candidate, examples: list[Example], plan: CandidatePlan
    ) -> list[SimulatedStep]:
        prober = self.proposer.prober
        assert prober is not None
        base_probe = prober.run(base.source)
        if start.status == PREDICTED:  # not written yet: its base's program, the revisions so far in words
            shown, probe = base, base_probe
            correct = [bool(c) for c in start.data.get("correct", [])]
            chain = list(start.data.get("chain", []))
        else:
            shown = self.candidates.get(str(start.id), base)
            probe = prober.run(shown.source)
            correct = [bool(probe.correct.get(ex.id)) for ex in examples]
            chain = []
        answers: list[str | None] = [probe.predictions.get(ex.id) for ex in examples]
        steps = []
        for revision in plan.subplans:
            behaviour = list(zip(examples, correct, answers, strict=False))
            sim = self._ask(shown, probe, [*chain, revision], behaviour)
            if sim is None:
                break
            correct = [bool(c) for c in sim["correct"]]
            answers = [None] * len(examples)
            chain.append(revision)
            steps.append(self._step(base, base_probe.correct, examples, correct, chain, sim))
        return steps

    def _ask(
        self,
        shown: Candidate,
        probe: ProbeResult,
        chain: list[str],
        behaviour: list[tuple[Example, bool, str | None]],
    ) -> Behaviour | None:
        """One simulation call: ``shown``'s whole source, its validation trace and its run on the probe examples
        (every prompt and answer), the revision (after ``chain[:-1]``, described but not yet written) and the
        current behaviour to predict from."""
        lines = [
            f"- example {i + 1}: input {ex.input!r}; target {ex.target!r}; current answer {pred!r} "
            f"({'correct' if ok else 'wrong'})"
            for i, (ex, ok, pred) in enumerate(behaviour)
        ]
        earlier = "".join(f"\n(already applied, not yet written: {c})" for c in chain[:-1])
        budget = self.proposer.evidence_tokens(SIMULATOR_TOKENS)
        runs = records_within(
            probe.records, budget // 4, f"# {shown.id} on the probe examples (training split), every prompt and answer"
        )
        user = (
            f"{sources_within([shown], budget // 3)}{earlier}\n\n## Revision\n{chain[-1]}\n\n"
            f"{trace_excerpts(self.state, shown, token_budget=budget // 4)}\n\n{runs}\n\n"
            f"## Current behaviour on {len(behaviour)} training examples\n" + "\n".join(lines)
        )
        messages = [
            {"role": "system", "content": SIMULATION.format(n=len(behaviour))},
            {"role": "user", "content": user},
        ]
        value, attempts = ask_json(
            self.proposer.model,
            messages,
            _simulation_schema(len(behaviour)),
            max_tokens=min(512, self.proposer.max_tokens),
        )
        self.calls.append({"start": shown.id, "revisions": chain, "attempts": attempts})
        return value

    def _step(
        self,
        base: Candidate,
        base_correct: dict[str, float],
        examples: list[Example],
        correct: list[bool],
        chain: list[str],
        sim: Behaviour,
    ) -> SimulatedStep:
        n = max(1, len(examples))
        was = [bool(base_correct.get(ex.id)) for ex in examples]
        gained = [ex.id for ex, c, w in zip(examples, correct, was, strict=False) if c and not w]
        lost = [ex.id for ex, c, w in zip(examples, correct, was, strict=False) if w and not c]
        raw_gain = (sum(correct) - sum(was)) / n
        raw_std = max(MIN_STD, 0.05, ((len(gained) + len(lost)) ** 0.5) / n)
        probe_context = self.proposer.prober.run(base.source).context_tokens if self.proposer.prober else 0.0
        ratio = sim["context_tokens"] / probe_context if probe_context else 1.0
        usage = Usage(round(base.cost.get("input_tokens", 0.0) * ratio), round(base.cost.get("output_tokens", 0.0)))
        implementation = Usage(0, int(sim["implementation_tokens"]))
        bits = "".join("1" if c else "0" for c in correct)
        return SimulatedStep(
            state=(
                f"predicted {sum(correct)}/{n} probe examples right ({len(gained)} gained, {len(lost)} lost vs "
                f"{base.id})"
            ),
            cost=(0.0, 0.0, round(self.proposer.proposer_price.dollars(implementation), 6)),
            key=f"{base.id}|{bits}",
            score=None if sim["breaks_harness"] else predicted_score(base.score, raw_gain, self.calibration),
            std=max(raw_std, self.calibration.residual),
            node_cost=(
                1.0,
                float(usage.input_tokens + usage.output_tokens),
                round(self.proposer.task_price.dollars(usage), 6),
            ),
            data={
                "summary": chain[-1],
                "chain": list(chain),
                "hypothesis": f"predicted on {n} training examples: +{len(gained)} / -{len(lost)} vs {base.id}",
                "iteration": self.state.iteration,
                "base": base.id,
                "correct": correct,
                "raw_gain": round(raw_gain, 6),
                "raw_std": round(raw_std, 6),
                "flips": {"gained": gained, "lost": lost},
                "implementation_tokens": int(sim["implementation_tokens"]),
                "context_tokens": sim["context_tokens"],
                "calibration": self.calibration.to_json(),
            },
        )
