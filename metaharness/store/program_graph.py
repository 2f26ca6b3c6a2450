"""The run's lasting program graph (``program-graph.json``): every candidate and every prediction not yet realised.

Nodes are candidate harnesses (``metaharness.planner.program``): each committed candidate (``evaluated``,
``implemented`` or ``failed``, with its measured score and cost) under its own id, and each program a proposer
predicted but nobody chose yet (``predicted``, with its predicted score, std and cost), under the proposer's node
id; edges are revisions. Seeds have no in-edge; the graph's ``start`` is ``root`` (the run's root commit, not a
node).

The file is a cache of the candidates plus the predictions: ``sync`` rebuilds every candidate's node from the
committed candidates, so a kill between a commit and the graph's save loses nothing, and a missing file is rebuilt
(losing only the unrealised predictions). It is written atomically (``save``). A file that cannot be read
(edited by hand) raises ``InputError`` from ``load``; a run reopened for running moves
it aside (``set_aside``) and rebuilds it, with a note.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypedDict

from metaharness.candidate import Candidate, Prediction, id_number
from metaharness.errors import InputError
from metaharness.planner import program
from metaharness.planner.graph import Node, PlanGraph
from metaharness.store.crash import crash_point
from metaharness.store.files import atomic_write_json

GRAPH_FILE = "program-graph.json"
START = "root"


class ProgramGraphFile:
    """A run's ``program-graph.json`` as its run directory hands it out: read synced with the committed candidates
    (``candidates`` returns them), written atomically."""

    def __init__(self, run_dir: Path, candidates: Callable[[], list[Candidate]]) -> None:
        self.run_dir = run_dir
        self.candidates = candidates

    def read(self) -> PlanGraph:
        """The saved graph synced with the committed candidates (built from them when none is saved)."""
        return sync(load(self.run_dir), self.candidates())

    def write(self, graph: PlanGraph) -> None:
        save(self.run_dir, graph)


def empty() -> PlanGraph:
    """A run's program graph before any candidate."""
    return program.program_graph(START)


def load(run_dir: Path) -> PlanGraph | None:
    """The saved graph (``None`` when there is none yet); an unreadable file raises ``InputError``."""
    path = Path(run_dir) / GRAPH_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise InputError(f"it holds a JSON {type(data).__name__}, not an object")
        budget = data.get("budget")
        # A graph saved without a budget (the proposer sets one per iteration) is read with a placeholder.
        graph = PlanGraph.from_json({**data, "budget": [0.0] * len(program.LIMITS)} if budget is None else data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, InputError) as exc:
        raise InputError(
            f"{path} cannot be read as a program graph ({exc}). Delete or move it: it is rebuilt from the committed "
            "candidates (the predictions nobody chose are lost); rerunning the run does this for you."
        ) from None
    if budget is None:
        graph.budget = None
    return graph


def save(run_dir: Path, graph: PlanGraph) -> None:
    """Write the graph atomically (temporary file, fsync, rename, directory fsync)."""
    atomic_write_json(Path(run_dir) / GRAPH_FILE, graph.to_json())
    crash_point("graph:saved")


def set_aside(run_dir: Path) -> Path:
    """Move an unreadable graph file out of the way (kept for inspection); returns where it went."""
    path = Path(run_dir) / GRAPH_FILE
    aside = path.with_name(f"{GRAPH_FILE}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
    path.replace(aside)
    return aside


def sync(graph: PlanGraph | None, candidates: list[Candidate]) -> PlanGraph:
    """Make ``graph`` (a new one when ``None``) agree with the committed ``candidates``, in place, and return it.

    Every candidate becomes the node of its id with its status and an edge from its parent (none for a seed). An
    evaluated candidate's node holds its measured score and cost; an implemented one's its predicted score, std
    and evaluation cost (it can still be chosen for evaluation); a failed one's no score. A candidate whose
    ``prediction["node"]`` names a predicted node of the graph takes that node's place (relabelled to the
    candidate id; its edges, label and data stay, the prediction kept in ``data["prediction"]`` and the iteration
    that predicted it in ``data["predicted_in"]``; ``data["iteration"]`` is the candidate's). Predicted nodes stay
    as they are. Idempotent: syncing twice changes nothing the second time.
    """
    if graph is None:
        graph = empty()
    for candidate in sorted(candidates, key=lambda c: id_number(c.id)):
        node = candidate.prediction.node if candidate.prediction is not None else None
        if candidate.id not in graph.nx:
            if node is not None and node in graph.nx and graph.node(node).status == program.PREDICTED:
                realised = program.mark(graph, node, candidate.status, new_id=candidate.id)
                if "iteration" in realised.data:  # when it was predicted; "iteration" becomes when it was realised
                    data = {k: v for k, v in realised.data.items() if k != "iteration"}
                    graph.update_node(candidate.id, data={**data, "predicted_in": realised.data["iteration"]})
            else:
                graph.add_node(candidate.id, score=0.0, status=candidate.status)
        current = graph.node(candidate.id)
        changes = {**_measured(candidate, current), "data": _about(candidate, current.data)}
        if any(getattr(current, k) != v for k, v in changes.items()):
            graph.update_node(candidate.id, **changes)
        parent = candidate.parent
        if parent is not None and parent in graph.nx and all(e.source != parent for e in graph.in_edges(candidate.id)):
            program.add_revision(graph, parent, candidate.id, summary=candidate.summary)
    return graph


class _Measured(TypedDict):
    """The node fields a committed candidate fixes."""

    status: str
    score: float | None
    std: float
    cost: tuple[float, ...]


def _measured(candidate: Candidate, node: Node) -> _Measured:
    """The node fields a committed candidate fixes: status, score, std and evaluation cost."""
    prediction = candidate.prediction or Prediction()
    if candidate.evaluated:
        return {
            "status": program.EVALUATED,
            "score": candidate.score,
            "std": 0.0,
            "cost": program.cost_vector(candidate.cost, evals=1),
        }
    if candidate.implemented:
        score, std, cost = prediction.score, prediction.std, prediction.cost
        return {
            "status": program.IMPLEMENTED,
            "score": float(score) if score is not None else (node.score if node.score is not None else 0.0),
            "std": float(std) if std is not None else node.std,
            "cost": program.cost_vector(cost, evals=1) if cost is not None else node.cost,
        }
    measured = program.cost_vector(candidate.cost, evals=1) if candidate.evaluation else ()
    return {"status": program.FAILED, "score": None, "std": 0.0, "cost": measured}


def _about(candidate: Candidate, data: Mapping[str, object]) -> dict[str, object]:
    """The node's data with the candidate's iteration and summary (and its prediction, unless the node kept the
    prediction it had in the graph)."""
    about = {**data, "iteration": candidate.iteration, "summary": candidate.summary}
    stored = candidate.prediction.to_json() if candidate.prediction is not None else {}
    if stored and "prediction" not in about:
        about["prediction"] = stored
    return about
