"""What the run reports show, read once from a run directory: candidates, log, test results, best and front, the
lasting program graph, predicted vs. actual scores, predicted vs. realised costs and where the spend went.

One notion of a result runs through all of them (``Candidate.result``): a partly scored candidate shows on how many
examples of its share (``0.667 (3/4)``) and never counts as a result: not as the best, not in the best-so-far curve,
not as an "actual" score against its prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaharness import frontier
from metaharness.candidate import Candidate, Evaluation
from metaharness.errors import InputError
from metaharness.planner import program
from metaharness.planner.graph import Node, PlanGraph
from metaharness.store import program_graph
from metaharness.store.run_dir import RunDirectory

PREDICTED_HEADERS = ["node", "parents", "predicted", "label", "eval cost", "depth", "predicted in", "summary"]
LABELS = {1: "goal", 0: "neutral", -1: "dead end"}
# Where an iteration's task-model spend went (the iteration line's ``spend``), in the order a reader follows it.
SPEND_PARTS = {"predict": "predicting", "check": "checking", "measure": "measuring"}
ENTRIES = ("evals", "tokens", "usd")
# The role of the task model's calls in ``spend.jsonl`` (every other role is the proposer's: its model, its planning
# subagents, a coding agent).
TASK_ROLE = "task"


@dataclass(frozen=True)
class IterationSpend:
    """What one iteration spent: per part (``SPEND_PARTS``) its spend, ``None`` where the line does not record it
    (a run from before the split records only what its evaluations spent, as ``measure``); ``budget`` the
    iteration's budget as its first decision had it (``None``: no limit on that entry)."""

    iteration: int
    parts: Mapping[str, Mapping[str, float] | None]
    budget: Mapping[str, float | None]


@dataclass
class RunView:
    """Everything the summaries show, read once from a run directory."""

    path: Path
    config: dict[str, Any]
    records: list[Candidate]
    log: list[dict[str, Any]]
    test: dict[str, Evaluation] = field(default_factory=dict)
    # Scores on the validation examples held out of the search (the best candidates'), by candidate.
    holdout: dict[str, Evaluation] = field(default_factory=dict)
    # The lasting program graph synced with the candidates; ``graph_problem`` says why it was rebuilt.
    graph: PlanGraph | None = None
    graph_problem: str | None = None
    # Everything the run spent (``spend.jsonl``: tokens, usd, calls); ``None`` when it cannot be totalled.
    spent: dict[str, float] | None = None
    # What the proposer's own calls cost (``spend.jsonl`` lines of any role but the task model's): tokens, usd.
    proposer_spent: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, run: RunDirectory) -> RunView:
        records = run.candidates()
        test = {r.id: ev for r in records if (ev := run.test_result(r.id)) is not None}
        holdout = {r.id: ev for r in records if (ev := run.split_result(r.id, "holdout")) is not None}
        problem = None
        try:
            saved = program_graph.load(run.path)
        except InputError as exc:
            saved, problem = None, f"the program graph was rebuilt from the candidates: {exc}"
        graph = program_graph.sync(saved, records)
        proposer: dict[str, float] = {}
        try:
            spent: dict[str, float] | None = run.spent()
            proposer = _proposer_spend(run.spend.records())
        except InputError as exc:  # a damaged spend line: the report still shows the rest, and says so
            spent, problem = None, "; ".join(filter(None, [problem, f"the run's spend cannot be totalled: {exc}"]))
        return cls(run.path, run.settings(), records, run.log_records(), test, holdout, graph, problem, spent, proposer)

    @property
    def best(self) -> Candidate | None:
        return frontier.best(self.records)

    @property
    def front(self) -> list[Candidate]:
        return frontier.pareto_front(self.records)

    def notes(self) -> list[str]:
        """Stops and skipped test evaluations as the log recorded them (a note repeated by reruns: its last time)."""
        latest: dict[str, str] = {}
        for entry in self.log:
            if entry.get("type") == "stop":
                text = f"stopped: {entry.get('reason', '')}"
            elif entry.get("type") == "test_skipped":
                text = f"test split not evaluated: {entry.get('reason', '')}"
            else:
                continue
            latest.pop(text, None)
            latest[text] = entry.get("time", "")
        notes = [f"{when} {text}" for text, when in latest.items()]
        return notes + ([self.graph_problem] if self.graph_problem else [])

    def predicted(self) -> list[tuple[Candidate, float]]:
        """Every candidate with a result (scored on its whole share) that carried a predicted score, with that
        score."""
        return [
            (r, float(r.prediction.score))
            for r in self.records
            if r.prediction is not None and r.prediction.score is not None and r.supported
        ]

    def unjudged(self) -> list[Candidate]:
        """The partly scored candidates that carried a predicted score: no result yet to compare it with."""
        return [r for r in self.records if r.partial and r.prediction is not None and r.prediction.score is not None]

    def tried(self) -> str:
        """What the search tried, in one sentence."""
        r = self.records
        seeds = sum(c.iteration == 0 for c in r)
        iterations = max((c.iteration for c in r), default=0)
        counts = [
            (sum(c.supported for c in r), "with a result (scored on every search example)"),
            (sum(c.partial for c in r), "partly scored (no result yet)"),
            (sum(c.implemented for c in r), "implemented, not scored"),
            (sum(c.failed for c in r), "failed"),
        ]
        waiting = len(self.predicted_nodes())
        return (
            f"{_count(len(r), 'candidate')}: {_count(seeds, 'seed')} and {_count(len(r) - seeds, 'revision')} over "
            f"{_count(iterations, 'iteration')}; "
            + ", ".join(f"{n} {what}" for n, what in counts if n)
            + (f"; {_count(waiting, 'more program')} predicted and not chosen" if waiting else "")
            + "."
        )

    def won(self) -> str:
        """What won, in one sentence: the best, what it rests on, its line of revisions and its other scores."""
        best = self.best
        if best is None or best.evaluation is None:
            return "No candidate has a result yet (none is scored on every search example)."
        chain = " -> ".join(f"{c.id} {c.result()}" for c in self.lineage(best))
        text = (
            f"{best.id}, val {best.result()} on {best.evaluation.examples} search examples "
            f"(iteration {best.iteration}: {best.summary}); its line: {chain}"
        )
        if best.id in self.holdout:
            judged = self.holdout[best.id]
            text += f"; held-out val {judged.primary:.3f} on {judged.examples} examples the search never saw"
        if best.id in self.test:
            text += f"; test {self.test[best.id].primary:.3f} on {self.test[best.id].examples} examples"
        return text + "."

    def lineage(self, candidate: Candidate) -> list[Candidate]:
        """``candidate`` and the candidates it revises, back to its seed (seed first)."""
        by_id = {r.id: r for r in self.records}
        chain = [candidate]
        while chain[-1].parent in by_id and len(chain) <= len(by_id):
            chain.append(by_id[str(chain[-1].parent)])
        return chain[::-1]

    def best_so_far(self) -> list[tuple[int, Candidate]]:
        """Per iteration with a result, the best candidate with a result up to it (the report's curve ends at
        ``best``)."""
        curve: list[tuple[int, Candidate]] = []
        for it in sorted({r.iteration for r in self.records if r.supported}):
            top = frontier.best([r for r in self.records if r.iteration <= it])
            if top is not None:
                curve.append((it, top))
        return curve

    def prediction_error(self) -> float | None:
        """The mean absolute error of the predicted scores (``None`` without predictions)."""
        pairs = self.predicted()
        return sum(abs(r.score - p) for r, p in pairs) / len(pairs) if pairs else None

    def predicted_nodes(self) -> list[Node]:
        """The predicted programs of the graph nobody has realised yet, best predicted first."""
        nodes = program.nodes_with(self.graph, program.PREDICTED) if self.graph is not None else []
        return sorted(nodes, key=lambda n: -(n.score or 0.0))

    def predicted_rows(self) -> list[list[str]]:
        """One row per predicted node, under ``PREDICTED_HEADERS`` (for ``history --predicted`` and the reports)."""
        graph = self.graph
        rows = []
        for node in self.predicted_nodes():
            assert graph is not None
            try:
                steps = str(program.depth(graph, node.id))
            except InputError:  # its only parents failed: no chain leads to it
                steps = "unreachable"
            edges = graph.in_edges(node.id)
            iteration = node.data.get("iteration")
            rows.append(
                [
                    str(node.id),
                    ", ".join(str(e.source) for e in edges),
                    f"{node.score or 0.0:.3f}" + (f" +- {node.std:.3f}" if node.std else ""),
                    LABELS.get(round(node.reward), f"{node.reward:g}"),
                    cost_text(node.cost),
                    steps,
                    "" if iteration is None else str(iteration),
                    " | ".join(e.action for e in edges if e.action)[:200],
                ]
            )
        return rows

    def iterations(self) -> dict[int, dict[str, Any]]:
        """Each iteration's (last) ``summary.jsonl`` line."""
        return {int(e["iteration"]): e for e in self.log if e.get("type") == "iteration"}

    def iteration_costs(self) -> list[tuple[int, dict[str, float] | None, dict[str, float]]]:
        """Per iteration: what its evaluations were predicted to spend (``None`` when none of its candidates
        carried a prediction: the seeds) and what they spent, as the same quantity (example-evaluations, tokens and
        dollars the run was charged; see ``metaharness.budget``)."""
        predicting = {r.iteration for r in self.records if r.prediction is not None and r.prediction.to_json()}
        return [
            (
                it,
                dict(line["cost"].get("predicted") or {}) if it in predicting else None,
                dict(line["cost"].get("realised") or {}),
            )
            for it, line in sorted(self.iterations().items())
            if "cost" in line
        ]

    def iteration_spend(self) -> list[IterationSpend]:
        """Per iteration, where its spend went (``IterationSpend``): the line's ``spend`` split when it has one,
        else (an older run) what its evaluations spent, as measuring."""
        rows = []
        for it, line in sorted(self.iterations().items()):
            split, cost, budget = line.get("spend"), line.get("cost"), line.get("budget")
            parts: dict[str, Mapping[str, float] | None]
            if isinstance(split, Mapping):
                parts = {key: _spend(split.get(key)) for key in SPEND_PARTS}
            else:
                realised = cost.get("realised") if isinstance(cost, Mapping) else None
                parts = {"predict": None, "check": None, "measure": _spend(realised)}
            limits = {k: _number(budget.get(k)) for k in ENTRIES} if isinstance(budget, Mapping) else {}
            rows.append(IterationSpend(it, parts, limits))
        return rows

    def spend_story(self) -> tuple[list[list[str]], list[str]]:
        """The run's spend at a glance, in what the run was charged (a call answered by the response cache or by a
        replay of recorded calls is free): rows ``[what, evals, tokens, USD]`` and one note per budget (the run's caps,
        each iteration's budget).

        The rows add up to the last, ``everything``, which is the total of ``spend.jsonl`` (what the caps count and
        the cost chart ends at): predicting, checking and measuring (the iteration lines' ``spend``), the held-out
        examples (choosing among the search's best, judging the best) and the test split (their saved results), the
        proposer's own model calls (``spend.jsonl`` by role), and what is left: task-model calls of an evaluation
        stopped before its result was recorded (an older run, which did not split its iterations' spend: predicting,
        checking and those). Below the total, the free calls: what the cached and replayed calls would have cost,
        counted in no total."""
        spends = self.iteration_spend()
        split = bool(spends) and all(s.parts["predict"] is not None for s in spends)
        rows: list[list[str]] = []
        counted: list[Mapping[str, float] | None] = []
        for key, name in SPEND_PARTS.items():
            if not spends or any(s.parts[key] is None for s in spends):
                rows.append([name, "not recorded", "", ""])
                continue
            part = _summed([s.parts[key] for s in spends])
            counted.append(part)
            rows.append(_spend_row(name, part))
        confirmed = [r.evaluation.confirm for r in self.records if r.evaluation and r.evaluation.confirm]
        held_out = [*confirmed, *self.holdout.values()]
        for name, results in (
            ("choosing and judging on held-out examples", held_out),
            ("the test split", [*self.test.values()]),
        ):
            if results:
                part = _summed([ev.spend().to_json() for ev in results])
                counted.append(part)
                rows.append(_spend_row(name, part))
        if self.spent is not None:
            if self.proposer_spent.get("tokens") or self.proposer_spent.get("usd"):
                counted.append(self.proposer_spent)
                rows.append(_spend_row("the proposer model", {"evals": math.nan, **self.proposer_spent}))
            parted = _summed(counted)
            left = {e: max(0.0, float(self.spent.get(e, 0.0)) - parted[e]) for e in ("tokens", "usd")}
            if not split:
                rows.append(_spend_row("predicting, checking and other calls", {"evals": math.nan, **left}))
            elif left["tokens"] >= 0.5 or left["usd"] >= 5e-5:
                name = "task-model calls of evaluations stopped before they were recorded"
                rows.append(_spend_row(name, {"evals": math.nan, **left}))
            rows.append(_spend_row("everything (spend.jsonl)", {"evals": math.nan, **self.spent}))
        free = self.free_calls()
        if free["tokens"]:
            rows.append(_spend_row("cached and replayed calls: free, in no total", free))
        stored = self.config.get("per_run") or self.config.get("run_budget")  # its key before round four
        caps = {k: v for k, v in (stored or {}).items() if _number(v) is not None}
        notes = ["run budget: " + (", ".join(f"{k} {v:g}" for k, v in caps.items()) if caps else "no cap")]
        for s in spends:
            limits = {k: v for k, v in s.budget.items() if v is not None}
            if s.iteration == 0 or not limits:
                continue
            used = _summed(list(s.parts.values()))
            what = "measuring" if s.parts["predict"] is None else "predicting, checking and measuring"
            shares = ", ".join(f"{used[k]:,.4g} of {v:,.4g} {k}" for k, v in limits.items())
            notes.append(f"iteration {s.iteration}: {what} spent {shares} (its budget)")
        return rows, notes

    def free_calls(self) -> dict[str, float]:
        """What the calls answered for free cost where they were first made: example-evaluations and tokens of every
        evaluation (validation stages, held-out, test) beyond what the run was charged for it; USD 0."""
        evaluations = [r.evaluation for r in self.records if r.evaluation is not None]
        evaluations += [ev.confirm for ev in evaluations if ev.confirm is not None]
        evaluations += [*self.holdout.values(), *self.test.values()]
        evals = tokens = 0.0
        for ev in evaluations:
            charged = ev.spend()
            evals += max(0.0, ev.examples - charged.evals)
            tokens += max(0.0, ev.cost.get("input_tokens", 0.0) + ev.cost.get("output_tokens", 0.0) - charged.tokens)
        return {"evals": evals, "tokens": tokens, "usd": 0.0}

    def spent_over_time(self) -> list[tuple[str, float, dict[str, float]]]:
        """The run's charged spend as it grew: ``(when, x, spent)`` after each iteration (its line's ``spent``, the
        ``spend.jsonl`` total at that moment), then the whole run's total when anything was spent after the last
        iteration (a test split, judging, a stopped session), so the last point is the ``everything`` of
        ``spend_story``."""
        points = [
            (f"after iteration {it}", float(it), dict(line.get("spent") or {}))
            for it, line in sorted(self.iterations().items())
        ]
        if self.spent is not None:
            last = points[-1][2] if points else {}
            if any(float(self.spent.get(e, 0.0)) != float(last.get(e, 0.0)) for e in ("tokens", "usd")) or not points:
                x = points[-1][1] + 1.0 if points else 0.0
                points.append(("the whole run (spend.jsonl)", x, dict(self.spent)))
        return points

    def proposer_failures(self) -> list[tuple[int, str]]:
        """(iteration, error) of every time the proposer raised (``proposer_failure`` lines; older runs recorded it
        in the iteration's line)."""
        return [
            (int(e["iteration"]), str(e["proposer_error"]))
            for e in self.log
            if e.get("proposer_error") and e.get("type") in ("proposer_failure", "iteration")
        ]

    def allotments(self) -> list[list[str]]:
        """Per iteration of staged evaluation: its policy, the candidates it considered, the examples it allotted
        (``c012 0->4->8``), its predicted and realised spend and what greedy and successive halving would have chosen
        at its first round."""
        rows = []
        for it, line in sorted(self.iterations().items()):
            if "allotted" not in line or it == 0:
                continue
            allotted = ", ".join(f"{cid} {a}->{b}" for cid, (a, b) in line["allotted"].items()) or "nothing"
            alternatives = line.get("alternatives") or {}
            rows.append(
                [
                    str(it),
                    str(line.get("policy", "")),
                    str(len(line.get("considered", []))),
                    allotted,
                    spend_text(line["cost"].get("predicted") or {}),
                    spend_text(line["cost"].get("realised") or {}),
                    ", ".join(f"{c} {t}" for c, t in (alternatives.get("greedy") or {}).items()) or "nothing",
                    ", ".join(f"{c} {t}" for c, t in (alternatives.get("halving") or {}).items()) or "nothing",
                ]
            )
        return rows


def cost_of(record: Candidate, key: str) -> float:
    return float(record.evaluation.cost.get(key, 0.0)) if record.evaluation else 0.0


ALLOTMENT_HEADERS = [
    "iteration",
    "evaluation",
    "considered",
    "examples allotted",
    "predicted spend",
    "realised spend",
    "greedy would allot",
    "halving would allot",
]


def cost_cell(record: Candidate, key: str, form: str) -> str:
    """A cost of the record's evaluation as a table cell, blank when it has none (implemented, failed before)."""
    return form.format(cost_of(record, key)) if record.evaluation is not None else ""


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(n: int, noun: str) -> str:
    """``1 seed``, ``2 seeds``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _proposer_spend(lines: list[dict[str, Any]]) -> dict[str, float]:
    """Tokens and dollars of the ``spend.jsonl`` lines made by any role but the task model's."""
    mine = [line for line in lines if line.get("role") not in (None, TASK_ROLE)]
    return {"tokens": float(sum(int(x.get("tokens", 0)) for x in mine)), "usd": sum(float(x["usd"]) for x in mine)}


def _spend_row(name: str, spend: Mapping[str, float]) -> list[str]:
    """``[name, evals, tokens, USD]`` of a spend (evals blank where they are not counted: NaN)."""
    evals = float(spend.get("evals", 0.0))
    return [
        name,
        "" if math.isnan(evals) else f"{evals:g}",
        f"{float(spend.get('tokens', 0)):,.0f}",
        f"${float(spend.get('usd', 0)):.4f}",
    ]


def _summed(spends: list[Mapping[str, float] | None]) -> dict[str, float]:
    """The spends added up, entry by entry (a missing spend counts 0)."""
    return {e: sum(float(s.get(e, 0.0)) for s in spends if s is not None) for e in ENTRIES}


def _spend(value: object) -> dict[str, float] | None:
    """A spend object of a log line (``{"evals", "tokens", "usd"}``), ``None`` when there is none."""
    if not isinstance(value, Mapping):
        return None
    return {k: _number(value.get(k)) or 0.0 for k in ENTRIES}


def spend_text(spend: dict[str, Any]) -> str:
    """A spend as ``12 evals, 9,800 tok, $0.0000``."""
    return (
        f"{float(spend.get('evals', 0)):g} evals, {float(spend.get('tokens', 0)):,.0f} tok, "
        f"${float(spend.get('usd', 0)):.4f}"
    )


def cost_text(cost: tuple[float, ...]) -> str:
    """A program node's evaluation cost ``(evals, tokens, usd)`` as ``1200 tok $0.0040``."""
    if len(cost) != len(program.LIMITS):
        return ""
    return f"{cost[1]:.0f} tok ${cost[2]:.4f}"
