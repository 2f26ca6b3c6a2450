"""The proposer seam: what a proposer sees of a run, and what it returns.

The loop owns the candidates (evaluation, git store, budget); a ``Proposer`` only reads the run's state and
returns new candidate programs. The whole contract of ``Proposer.propose``:

- It receives a ``RunState`` snapshot: every committed ``Candidate`` so far
  (source, scores, cost, prediction, failed ones with their errors; ``RunState.trace_path`` finds a
  candidate's per-example validation trace), the iteration number, how many proposals the
  loop takes this iteration (``proposals``) and any other budget left for it.
- It returns at most ``state.proposals`` ``Proposal`` objects, in the order it wrote them. Each
  names an existing candidate id as ``parent`` (or ``None`` for a fresh program), carries the complete source of
  the new harness file (``metaharness.candidates.protocol``) and says in words what changed (``summary``) and
  why it should help (``hypothesis``). ``prediction`` holds what the proposer predicted about the outcome (e.g.
  ``{"score": 0.42, "flips": {...}}``) so predicted vs. actual can be studied; ``None`` when it made no prediction.
  Extra proposals are dropped by the loop with a note; a proposal with an unknown parent is recorded as failed.
- ``state.graph`` is the run's lasting program graph (``metaharness.planner.program``): every committed
  candidate as a node (evaluated, implemented or failed) and every prediction made so far that was not realised.
  The proposer may add predicted nodes and edges and update predictions in place; the loop saves the graph when
  ``propose`` returns. A proposal that realises a graph node names it (``node``); a chosen chain
  A -> B -> C is one proposal C with ``parent`` A and ``intermediates`` [B]: the loop commits B as its own
  candidate (implemented, import-checked, not evaluated), then C as B's child. Intermediates do not count against
  ``proposals``; an intermediate shared by two proposals (the same ``node``) is committed once, and one whose node
  another proposal of the iteration evaluates, or a committed candidate already realised, is that candidate.
- It never evaluates on the validation or test split: the loop does, within budget. It may read what a program
  would score on recorded calls (``state.replay``: on validation examples its base was scored on, through a model
  that answers only calls the run already made; free, and the loop records it as the candidate's evidence when it
  is committed), and what a program whose outputs do not depend on the model's answers scores with no model call
  (``state.model_free``: free and exact; the loop scores such a candidate so too). It may run candidates on a few
  *training* examples (a probe) through the sandboxed evaluator:
  a probe's task-model calls are predictions, spent from the iteration's budget, so before each it asks
  ``state.predicting.affords(cost)`` and afterwards ``charge`` s what the probe cost (``metaharness.budget.Meter``);
  when ``state.predictions`` is False (the evaluation policy reads no prediction) it predicts nothing that costs.
- A proposer that cannot produce anything this iteration returns an empty list. It raises only for systemic
  failures (a missing key, an unreachable model, a reached cost cap), which stop the run with a clear message.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from metaharness.budget import Budget, Meter
from metaharness.candidate import Candidate, Prediction
from metaharness.planner.graph import PlanGraph
from metaharness.search.model_free import ModelFree
from metaharness.search.replay import Replay

# ``replay(source, example_ids)``: the program on those validation examples, through recorded calls only.
ReplayFunction = Callable[[str, Sequence[str]], Replay]
# ``model_free(source, example_ids)``: the program on those validation examples with no model call, when its outputs
# do not depend on the model's answers there (``metaharness.search.model_free``).
ModelFreeFunction = Callable[[str, Sequence[str]], ModelFree]


@dataclass
class RunState:
    """What a proposer sees at the start of an iteration."""

    task: str
    iteration: int
    candidates: list[Candidate]
    proposals: int
    # What the run's budget leaves of tokens and dollars for every model (a proposer's own spend included); math.inf
    # where nothing is capped. What evaluation may spend is the loop's (metaharness.search.staging), not the proposer's.
    money_left: Budget = field(default_factory=Budget)
    # What this iteration's predictions (task-model calls made while proposing: probes) may spend, and have spent.
    predicting: Meter = field(default_factory=Meter)
    # Whether the run's evaluation policy reads predictions; when False the proposer makes none that costs anything.
    predictions: bool = True
    # Free evidence (see the module docstring); None outside a run, or when the task model keeps no response cache.
    replay: ReplayFunction | None = None
    model_free: ModelFreeFunction | None = None
    run_dir: Path | None = None
    # The run's lasting program graph, synced with ``candidates`` (see the module docstring); the loop always sets
    # it, ``None`` only in a state built by hand (build one with metaharness.store.program_graph.sync).
    graph: PlanGraph | None = None

    def supported(self) -> list[Candidate]:
        """The supported candidates: scored on every example of the search's share (``Candidate.supported``)."""
        return [c for c in self.candidates if c.supported]

    def evaluated(self) -> list[Candidate]:
        """Deprecated name of `supported` (it never returned every evaluated candidate: a partly scored one is
        evaluated, not supported); kept for proposers written before it was renamed."""
        warnings.warn("RunState.evaluated() is now RunState.supported()", DeprecationWarning, stacklevel=2)
        return self.supported()

    def partial(self) -> list[Candidate]:
        """The candidates scored on part of the search's share so far."""
        return [c for c in self.candidates if c.partial]

    def failed(self) -> list[Candidate]:
        return [c for c in self.candidates if c.failed]

    def trace_path(self, candidate: Candidate) -> Path | None:
        """The candidate's per-example validation records (JSONL), when the run kept them."""
        if candidate.trace is None:
            return None
        return Path(self.run_dir) / candidate.trace if self.run_dir is not None else Path(candidate.trace)


@dataclass
class Proposal:
    """A new candidate program proposed as a revision of ``parent``.

    ``prediction``: what the proposer predicts of it (a ``Prediction``; keys of its own
    in ``extra``). ``node``: the program-graph node this proposal realises (the loop copies it into the prediction's
    ``node``).
    ``intermediates``: the steps of a chosen chain between ``parent`` and this program, in order, each a
    ``Proposal`` with its own source, summary, prediction and node (their own ``parent`` is not used: the
    first revises ``parent``, each next one the previous); they are committed implemented, scored at no cost where
    the free evidence can (``metaharness.search.free_evidence``), and evaluated only if a policy picks them.
    """

    parent: str | None
    source: str
    summary: str
    hypothesis: str = ""
    prediction: Prediction | None = None
    node: str | None = None
    intermediates: list[Proposal] = field(default_factory=list)


@runtime_checkable
class Proposer(Protocol):
    """Writes the next candidates (the module docstring is the contract); ``name`` is how runs record it."""

    name: str

    def propose(self, state: RunState) -> list[Proposal]: ...
