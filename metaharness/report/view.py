"""What the run reports show, read once from a run directory: candidates, log, test results, best and front, the
lasting program graph, predicted vs. actual scores and predicted vs. realised costs."""

from __future__ import annotations

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
        return cls(run.path, run.settings(), records, run.log_records(), test, holdout, graph, problem)

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
        """Every evaluated candidate that carried a predicted score, with that score."""
        return [
            (r, float(r.prediction.score))
            for r in self.records
            if r.prediction is not None and r.prediction.score is not None and r.evaluated
        ]

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

    def iteration_costs(self) -> list[tuple[int, dict[str, float], dict[str, float]]]:
        """Per iteration: what its evaluations were predicted to spend and what they spent, as the same quantity
        (example-evaluations, tokens and dollars the run was charged; see ``metaharness.budget``)."""
        return [
            (it, dict(line["cost"].get("predicted") or {}), dict(line["cost"].get("realised") or {}))
            for it, line in sorted(self.iterations().items())
            if "cost" in line
        ]

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


def val_text(record: Candidate) -> str:
    """The validation score as shown in tables: ``failed`` and ``implemented`` (not scored yet) say so, and a partly
    scored candidate shows on how many of its share (``0.500 (8/25)``: not supported, never the best)."""
    if record.failed:
        return "failed"
    if record.implemented or record.evaluation is None:
        return "implemented"
    ev = record.evaluation
    return f"{record.score:.3f}" + (f" ({ev.examples}/{ev.share})" if not ev.supported else "")


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
