"""``tps``: the coding proposer that plans in program space before it writes code.

The planning step runs TPS's four subagents with the proposer model (stage-specific prompts and JSON schemas,
asked through :func:`metaharness.planner.asking.ask_json`, which re-asks on malformed JSON):

1. multi-plan sampling: ``M`` revision plans from the frontier, each one or two revisions described in words;
2. state simulation: the frontier candidates run on a few held-out training examples with the task model (their
   real behaviour, :mod:`.probe`); for every revision the subagent predicts which of those examples the revised
   candidate gets right, what implementing it costs (tokens) and its prompt size; a second revision of a plan is
   simulated from the first one's predicted behaviour (the extension of a predicted candidate);
3. state merging: exact-key merge (same existing ancestor, same revision text, same predicted behaviour), so no
   false merges;
4. labels: +1 predicted to beat the best measured score, -1 when the subagent predicts the revision breaks the
   harness, 0 otherwise.

The program-space ILP (:mod:`.program_ilp`) then picks what to implement and evaluate within the iteration's
budget, and the coding agent implements exactly those chains. Every proposal carries its prediction. When planning
produces nothing usable (a weak model), the agent falls back to the ``base`` behaviour and says so in the record.
"""

from __future__ import annotations

import json
import re
from typing import Any

from metaharness.candidate import Candidate
from metaharness.models.types import ModelClient
from metaharness.planner.asking import ask_json
from metaharness.proposal import Proposal, RunState
from metaharness.proposers.coding import CodingProposer, submitted, to_proposal
from metaharness.proposers.probe import ProbeResult
from metaharness.proposers.program_plan import Predicted, label, plan, proposal_for
from metaharness.proposers.workspace import clip, summary_table
from metaharness.tasks.task import Example, Task

SAMPLING = """You are the plan-sampling subagent of a harness optimiser. A harness is the Python program around a
fixed task model. From the candidates below, propose {m} different revision plans. Each plan names an existing
candidate id as parent and lists one or two revisions, each one concrete sentence a programmer can implement
(what to change in the code and why). Mix small fixes of the best with different ideas. Never propose hard-coding
dataset answers. Reply with JSON only."""

SIMULATION = """You are the state-simulation subagent of a harness optimiser. You are shown a harness, a revision of
it, and how the harness currently behaves on {n} training examples. Predict, for each example in order, whether the
revised harness answers it correctly; estimate how many tokens implementing the revision costs, the prompt tokens
per example after it, and whether the revision is likely to break the harness. Reply with JSON only."""


def _sampling_schema(m: int, parents: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "plans": {
                "type": "array",
                "minItems": 1,
                "maxItems": m,
                "items": {
                    "type": "object",
                    "properties": {
                        "parent": {"type": "string", "enum": parents},
                        "revisions": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
                    },
                    "required": ["parent", "revisions"],
                },
            }
        },
        "required": ["plans"],
    }


def _simulation_schema(n: int) -> dict[str, Any]:
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
    return re.sub(r"\s+", " ", text.strip().lower())


class TPSProposer(CodingProposer):
    """The ``tps`` proposer (and, with ``selection`` != ``ilp``, its greedy / random / best-of-N baselines)."""

    def __init__(
        self,
        model: ModelClient | str,
        task: Task,
        task_model: ModelClient | str | None = None,
        *,
        selection: str = "ilp",
        plans: int = 4,
        probe_size: int = 6,
        **agent: Any,
    ) -> None:
        """``agent``: the coding agent's settings (:class:`~metaharness.proposers.coding.CodingProposer`)."""
        super().__init__(model, task, task_model, probe_size=probe_size, **agent)
        self.selection = selection
        self.plans = plans
        self.name = "tps" if selection == "ilp" else f"tps-{selection.replace('_', '-')}"

    # ------------------------------------------------------------------ the four stages

    def _sample(self, state: RunState, frontier: list[Candidate], log: dict[str, Any]) -> list[dict[str, Any]]:
        parts = [summary_table(state)]
        for cand in frontier:
            parts.append(f"## Candidate {cand.id} (score {cand.score:.3f})\n```python\n{clip(cand.source, 3000)}\n```")
        messages = [
            {"role": "system", "content": SAMPLING.format(m=self.plans)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]
        value, attempts = ask_json(
            self.model,
            messages,
            _sampling_schema(self.plans, [c.id for c in frontier]),
            max_tokens=min(1024, self.max_tokens),
        )
        log["sampling"] = attempts
        return (value or {}).get("plans", [])

    def _simulate(
        self, parent: Candidate, revision: str, behaviour: list[tuple[Example, bool, str | None]], log: list[Any]
    ) -> dict[str, Any] | None:
        lines = [
            f"- example {i + 1}: input {clip(ex.input, 300)!r}; target {clip(ex.target, 100)!r}; current answer "
            f"{clip(pred, 100)!r} ({'correct' if ok else 'wrong'})"
            for i, (ex, ok, pred) in enumerate(behaviour)
        ]
        user = (
            f"## Harness {parent.id}\n```python\n{clip(parent.source, 3000)}\n```\n\n## Revision\n{revision}\n\n"
            f"## Current behaviour on {len(behaviour)} training examples\n" + "\n".join(lines)
        )
        messages = [
            {"role": "system", "content": SIMULATION.format(n=len(behaviour))},
            {"role": "user", "content": user},
        ]
        value, attempts = ask_json(
            self.model, messages, _simulation_schema(len(behaviour)), max_tokens=min(512, self.max_tokens)
        )
        log.append({"parent": parent.id, "revision": revision, "attempts": attempts})
        return value

    def planning(self, state: RunState) -> tuple[list[Predicted], dict[str, Any]]:
        """Stages 1-4: the predicted candidates of this iteration, and the record of every stage."""
        log: dict[str, Any] = {"simulation": []}
        frontier = sorted(state.evaluated(), key=lambda c: -c.score)[:3]
        if not frontier or self.prober is None:
            return [], log
        by_id = {c.id: c for c in frontier}
        plans = self._sample(state, frontier, log)
        examples = self.prober.held_out.probe
        probes: dict[str, ProbeResult] = {c.id: self.prober.run(c.source) for c in frontier}
        best = frontier[0].score
        predicted: dict[tuple[str, ...], Predicted] = {}
        for plan_index, entry in enumerate(plans):
            parent = by_id.get(str(entry.get("parent")))
            if parent is None:
                continue
            probe = probes[parent.id]
            behaviour = [(ex, bool(probe.correct.get(ex.id)), probe.predictions.get(ex.id)) for ex in examples]
            previous_key, chain = parent.id, []
            for step, revision in enumerate(entry.get("revisions", [])[:2]):
                chain.append(_norm(revision))
                sim = self._simulate(parent, revision, behaviour, log["simulation"])
                if sim is None:
                    break
                correct = [bool(c) for c in sim["correct"]]
                key = (parent.id, *chain, "".join("1" if c else "0" for c in correct))  # stage 3: exact-key merge
                if key not in predicted:
                    gained = [
                        ex.id for ex, c, (_, was, _) in zip(examples, correct, behaviour, strict=False) if c and not was
                    ]
                    lost = [
                        ex.id for ex, c, (_, was, _) in zip(examples, correct, behaviour, strict=False) if was and not c
                    ]
                    n = max(1, len(examples))
                    score = min(1.0, max(0.0, parent.score + (sum(correct) - sum(b[1] for b in behaviour)) / n))
                    base_tokens = parent.cost.get("input_tokens", 0.0) + parent.cost.get("output_tokens", 0.0)
                    ratio = sim["context_tokens"] / probe.context_tokens if probe.context_tokens else 1.0
                    predicted[key] = Predicted(
                        key=f"plan{plan_index}-step{step}",
                        parent=previous_key,
                        summary=revision.strip(),
                        score=score,
                        std=max(0.05, ((len(gained) + len(lost)) ** 0.5) / n),
                        label=label(score, best, dead=sim["breaks_harness"]),  # stage 4
                        eval_cost={"tokens": round(base_tokens * ratio, 1)},
                        edit_cost={"tokens": float(sim["implementation_tokens"])},
                        hypothesis=f"predicted on {n} training examples: +{len(gained)} / -{len(lost)} vs {parent.id}",
                        details={
                            "flips": {"gained": gained, "lost": lost},
                            "probe": {
                                "examples": n,
                                "base_score": round(probe.score, 4),
                                "predicted_score": round(sum(correct) / n, 4),
                            },
                            "base": parent.id,
                            "context_tokens": sim["context_tokens"],
                        },
                    )
                previous_key = predicted[key].key
                behaviour = [(ex, c, None) for ex, c in zip(examples, correct, strict=False)]
        return list(predicted.values()), log

    # ------------------------------------------------------------------ the iteration

    def propose(self, state: RunState) -> list[Proposal]:
        k = state.evals_left
        if k < 1 or not state.candidates:
            return []
        predicted, log = self.planning(state)
        chosen = plan(state, predicted, self.selection) if predicted else None
        workspace = self.workspace(state)
        record = {"predicted": [p.__dict__ for p in predicted], "stages": log}
        if chosen is None or not chosen.chains:
            record["fallback"] = "planning produced no usable candidate; the agent proposes as the base proposer does"
            (workspace.root.parent / "planning.json").write_text(
                json.dumps(record, indent=1, default=str), encoding="utf-8"
            )
            return super().propose(state)
        record["selection"] = {
            "status": chosen.selection.status,
            "evaluate": chosen.selection.evaluate,
            "value": chosen.selection.value,
            "strategy": chosen.strategy,
        }
        (workspace.root.parent / "planning.json").write_text(
            json.dumps(record, indent=1, default=str), encoding="utf-8"
        )
        names = {}
        lines = []
        for rank, (parent, chain) in enumerate(chosen.chains):
            name = f"plan{rank + 1}"
            names[name] = (parent, chain, rank)
            steps = " Then: ".join(p.summary for p in chain)
            lines.append(
                f"- new/{name}: copy candidate {parent}, then implement: {steps} (submit with parent {parent})"
            )
        brief = (
            f"Iteration {state.iteration}. The planner chose these revisions; implement exactly these, one new "
            f"candidate each, under the given names, then call finish:\n" + "\n".join(lines)
        )
        self.write(state, workspace, brief, len(names))
        proposals = []
        for submission in submitted(workspace, len(names)):
            proposal = to_proposal(submission)
            if submission.name in names:
                parent, chain, rank = names[submission.name]
                planned = proposal_for(parent, chain, chosen, rank)
                proposal.prediction = planned.prediction
                proposal.hypothesis = proposal.hypothesis or planned.hypothesis
            proposals.append(proposal)
        return proposals
