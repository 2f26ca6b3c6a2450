"""The optimisation loop with a scripted proposer and evaluator: order of work, failures, resume, stops."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedProposer, program

from metaharness.budget import Budget, SearchBudget
from metaharness.candidate import Prediction
from metaharness.errors import ConfigurationError, MetaharnessError
from metaharness.models.protocol import StructuredOutputError
from metaharness.report import RunView, write_summary_markdown
from metaharness.report.page import render_html
from metaharness.search.loop import LoopEvents, LoopSettings, Optimizer, ProposerFailed, Seed, StopRequest
from metaharness.search.protocol import Proposal
from metaharness.search.settings import SearchSettings
from metaharness.store import RunDirectory

CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": 4, "proposer": "scripted", "evals_per_iter": 2}


def make(tmp_path: Path, proposer, evaluator, iterations=2, stop=None, events=None, max_proposer_failures=3):
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    search = SearchSettings(
        evaluation="best-of-n", budget=SearchBudget(evals_per_iter=2), max_proposer_failures=max_proposer_failures
    )
    settings = LoopSettings("toy", search, iterations)
    seeds = [Seed("zero", program(0.2)), Seed("few", program(0.3))]
    return run, Optimizer(
        run,
        settings,
        proposer,
        evaluator,
        seeds,
        stop=stop,
        events=events,
        write_summary=lambda: write_summary_markdown(run),
    )


def test_seeds_then_iterations_commit_every_candidate(tmp_path):
    evaluator = FakeEvaluator()
    proposer = ScriptedProposer({1: [Proposal(parent="c001", source=program(0.1, "broken"), summary="bad edit")]})
    run, opt = make(tmp_path, proposer, evaluator)
    outcome = opt.run()
    run.close()
    records = {c.candidate.id: c.candidate for c in run.store.candidates()}
    assert list(records) == ["c001", "c002", "c003", "c004", "c005"]
    assert records["c001"].summary == "seed: zero" and records["c001"].parent is None
    assert records["c003"].parent == "c002" and records["c003"].score == pytest.approx(0.4)
    assert records["c004"].failed and "SyntaxError" in records["c004"].error
    assert records["c005"].parent == "c003" and records["c005"].score == pytest.approx(0.5)
    assert outcome.best.id == "c005" and outcome.iterations_done == 2 and outcome.stopped is None
    # the proposer saw the failed candidate of iteration 1 in iteration 2
    assert [c.id for c in proposer.states[1].failed()] == ["c004"]
    assert proposer.states[0].proposals == 2
    assert [r["iteration"] for r in run.log_records("iteration")] == [0, 1, 2]
    assert run.log_records("test_skipped")[0]["reason"] == "no test split offline"
    assert "c005" in run.summary_md.read_text()
    assert not list(run.journal.folder.iterdir())


def test_staged_evaluation_allots_examples_within_the_budget_and_the_line_records_it(tmp_path):
    """The planner policy scores candidates in stages within the iteration's example-evaluations; the iteration's
    line records what was considered, allotted, predicted and spent, and what the baselines would have done."""
    proposals = [
        Proposal("c001", program(score), f"p{score}", prediction=Prediction(score=score, std=0.1))
        for score in (0.25, 0.5, 0.15, 0.35)
    ]
    proposer = ScriptedProposer({1: proposals[1:]})
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    search = SearchSettings(
        budget=SearchBudget(per_iteration=Budget(evals=10)), evaluation="planner", proposals=6, first_stage=1
    )
    settings = LoopSettings("toy", search, iterations=1)
    opt = Optimizer(run, settings, proposer, FakeEvaluator(), [Seed("zero", program(0.2))])
    outcome = opt.run()
    run.close()
    line = {r["iteration"]: r for r in run.log_records("iteration")}[1]
    assert line["policy"] == "planner" and line["reference"] == "c001"
    assert set(line["considered"]) == {"c002", "c003", "c004", "c005"}
    assert line["cost"]["realised"]["evals"] <= 10  # the budget holds
    assert line["cost"]["predicted"]["evals"] == line["cost"]["realised"]["evals"]  # the fake charges every example
    assert set(line["alternatives"]) == {"greedy", "halving"}
    spent = sum(after - before for before, after in line["allotted"].values())
    assert spent == line["cost"]["realised"]["evals"]
    assert outcome.best is not None and outcome.best.supported
    assert proposer.states[0].proposals == 6


def test_rerun_continues_at_next_iteration_without_reevaluating(tmp_path):
    evaluator = FakeEvaluator()
    run, opt = make(tmp_path, ScriptedProposer(), evaluator, iterations=1)
    opt.run()
    run.close()
    first = list(evaluator.evaluated)
    run, opt = make(tmp_path, ScriptedProposer(), evaluator, iterations=3)
    outcome = opt.run()
    run.close()
    assert evaluator.evaluated[: len(first)] == first
    assert [c for c, _ in evaluator.evaluated[len(first) :]] == ["c004", "c005"]
    assert outcome.iterations_done == 3
    assert [r.iteration for r in (c.candidate for c in run.store.candidates())] == [0, 0, 1, 2, 3]


def test_candidate_that_cannot_start_is_recorded_failed(tmp_path):
    extra = {
        1: [Proposal(parent="c009", source=program(0.9), summary="unknown parent")],
        2: [Proposal(parent="c001", source=program(0.9, "crash"), summary="fails to start")],
    }
    run, opt = make(tmp_path, ScriptedProposer(extra), FakeEvaluator(), iterations=2)
    outcome = opt.run()
    run.close()
    unknown, crashed = run.store.get("c004").candidate, run.store.get("c006").candidate
    assert unknown.failed and "c009" in unknown.error
    assert crashed.failed and crashed.error == "the harness could not start" and crashed.evaluation is None
    assert outcome.best.id == "c005"  # neither 0.9 counts: only evaluated candidates compete


def test_budget_exceeded_stops_cleanly_with_a_note(tmp_path):
    run, opt = make(tmp_path, ScriptedProposer(budget_at=2), FakeEvaluator(), iterations=3)
    outcome = opt.run()
    run.close()
    assert outcome.stopped.startswith("cost cap reached") and outcome.iterations_done == 1 and outcome.capped
    assert run.log_records("stop")[0]["reason"].startswith("cost cap reached")
    assert "cost cap reached" in run.summary_md.read_text()


def test_stop_request_finishes_the_evaluation_under_way_then_resume_continues(tmp_path):
    stop = StopRequest()

    class StopDuringSecondEval(FakeEvaluator):
        def evaluate(self, harness, split, **kw):
            if Path(harness).parent.name == "c002":
                stop.requested = True  # Ctrl-C while c002 is being evaluated
            return super().evaluate(harness, split, **kw)

    evaluator = StopDuringSecondEval()
    run, opt = make(tmp_path, ScriptedProposer(), evaluator, iterations=1, stop=stop)
    outcome = opt.run()
    run.close()
    assert outcome.stopped.startswith("interrupted")
    assert [c.candidate.id for c in run.store.candidates()] == ["c001", "c002"]  # c002 finished and committed
    assert run.completed_iterations() == {0}  # the seeds' iteration was done; iteration 1 never started...
    run, opt = make(tmp_path, ScriptedProposer(), evaluator, iterations=1)
    outcome = opt.run()
    run.close()
    assert [c.candidate.id for c in run.store.candidates()] == ["c001", "c002", "c003"]  # ...but nothing is redone
    assert [c for c, _ in evaluator.evaluated] == ["c001", "c002", "c003"]
    assert outcome.stopped is None


def test_test_split_evaluates_best_and_frontier_once(tmp_path):
    evaluator = FakeEvaluator()
    evaluator.test_available = True
    run, opt = make(tmp_path, ScriptedProposer(), evaluator, iterations=1)
    outcome = opt.run()
    run.close()
    tested = [c for c, split in evaluator.evaluated if split == "test"]
    assert outcome.best.id in tested and set(outcome.test) == set(tested)
    assert "test 0.4000" in run.store.get(outcome.best.id).note
    run, opt = make(tmp_path, ScriptedProposer(), evaluator, iterations=1)
    opt.run()
    run.close()
    assert [c for c, split in evaluator.evaluated if split == "test"] == tested


def test_events_report_progress(tmp_path):
    seen = []

    class Recorder(LoopEvents):
        def examples_done(self, done, total):
            seen.append((done, total))

        def candidate_finished(self, record):
            seen.append(record.id)

    run, opt = make(tmp_path, ScriptedProposer(), FakeEvaluator(), iterations=0, events=Recorder())
    opt.run()
    run.close()
    # both seeds are checked and committed, then each is scored on its 4 examples
    assert seen == ["c001", "c002", (1, 4), (2, 4), (3, 4), (4, 4), "c001", (1, 4), (2, 4), (3, 4), (4, 4), "c002"]


class FailingProposer(ScriptedProposer):
    """ScriptedProposer that raises ``failures[iteration]`` (or returns it, when it is not an exception) the first
    ``times`` times it is asked in that iteration."""

    def __init__(self, failures, times=1):
        super().__init__()
        self.failures = failures
        self.times = times
        self.asked: dict[int, int] = {}

    def propose(self, state):
        self.asked[state.iteration] = self.asked.get(state.iteration, 0) + 1
        if state.iteration in self.failures and self.asked[state.iteration] <= self.times:
            self.states.append(state)
            failure = self.failures[state.iteration]
            if isinstance(failure, BaseException):
                raise failure
            return failure
        return super().propose(state)


@pytest.mark.parametrize(
    "failure, shown",
    [
        (RuntimeError("This model's maximum context length is 8192 tokens"), "RuntimeError: This model's maximum"),
        (ConfigurationError("proposer model unreachable after 5 retries"), "ConfigurationError: proposer model"),
        (StructuredOutputError("malformed tool call: no 'path'"), "StructuredOutputError: malformed tool call"),
        ("not a list of proposals", "TypeError: the proposer returned str, not a Proposal"),
        (
            [Proposal(parent=None, source=None, summary="no source")],  # type: ignore[arg-type]
            "TypeError: the proposer returned a Proposal",
        ),
    ],
)
def test_a_proposer_failure_does_not_use_up_its_iteration_which_is_asked_again(tmp_path, failure, shown):
    proposer = FailingProposer({1: failure})
    run, opt = make(tmp_path, proposer, FakeEvaluator(), iterations=2)
    outcome = opt.run()
    run.close()
    assert outcome.stopped is None and outcome.iterations_done == 2
    (failed,) = run.log_records("proposer_failure")
    assert failed["iteration"] == 1 and failed["proposer_error"].startswith(shown)
    assert "Traceback" in failed["proposer_traceback"]
    assert [r["iteration"] for r in run.log_records("iteration")] == [0, 1, 2]  # both iterations ran, after all
    assert [s.iteration for s in proposer.states] == [1, 1, 2]  # iteration 1 was asked again
    assert [c.iteration for c in run.candidates()] == [0, 0, 1, 2]
    assert not list(run.journal.folder.iterdir())
    summary = run.summary_md.read_text()
    assert "Proposer failures (each iteration was asked again)" in summary and shown.split(":")[0] in summary
    page = render_html(RunView.load(run))
    assert "Proposer failures" in page and shown.split(":")[0] in page


def test_consecutive_proposer_failures_stop_the_run_with_an_error_and_a_rerun_continues(tmp_path):
    boom = RuntimeError("proposer model unreachable")
    # Two failures, then it works: under the limit of 3, the run goes on.
    run, opt = make(tmp_path, FailingProposer({1: boom, 3: boom}, times=2), FakeEvaluator(), iterations=3)
    assert opt.run().iterations_done == 3
    run.close()
    assert run.log_records("stop") == [] and len(run.log_records("proposer_failure")) == 4
    tmp = tmp_path / "second"
    run, opt = make(tmp, FailingProposer({2: boom}, times=99), FakeEvaluator(), iterations=4)
    with pytest.raises(ProposerFailed) as raised:
        opt.run()
    run.close()
    assert isinstance(raised.value, MetaharnessError) and raised.value.exit_code == 4
    message = str(raised.value)
    assert "failed 3 times in a row in iteration 2" in message and "proposer model unreachable" in message
    assert run.completed_iterations() == {0, 1}  # iteration 2 was never used up
    assert run.log_records("stop")[-1]["reason"] == message
    assert "stopped: the proposer scripted failed 3 times" in run.summary_md.read_text()
    # Fixed: the rerun asks the proposer again for iteration 2 and continues.
    run, opt = make(tmp, ScriptedProposer(), FakeEvaluator(), iterations=4)
    outcome = opt.run()
    run.close()
    assert outcome.stopped is None and outcome.iterations_done == 4
    assert [c.iteration for c in run.candidates()] == [0, 0, 1, 2, 3, 4]


def test_the_failure_limit_is_a_setting_and_budget_exceeded_is_no_failure(tmp_path):
    boom = RuntimeError("boom")
    run, opt = make(tmp_path, FailingProposer({1: boom}), FakeEvaluator(), iterations=3, max_proposer_failures=1)
    with pytest.raises(ProposerFailed, match=r"failed 1 times in a row in iteration 1"):
        opt.run()
    run.close()
    run, opt = make(tmp_path / "b", ScriptedProposer(budget_at=1), FakeEvaluator(), max_proposer_failures=1)
    outcome = opt.run()  # a reached cap stops cleanly, as before
    run.close()
    assert outcome.stopped.startswith("cost cap reached")
    assert run.log_records("proposer_failure") == []


class ChainProposer:
    """Iteration 1: predicts B (from c002), C and D (both from B) and E (from c001); chooses the chains
    c002 -> B -> C and c002 -> B -> D. Iteration 2: chooses E, predicted in iteration 1."""

    name = "chains"

    def __init__(self):
        self.states = []

    def propose(self, state):
        from metaharness.planner import program

        self.states.append(state)
        graph = state.graph
        if state.iteration == 1:
            program.add_predicted(graph, "B", "c002", 0.35, std=0.05, summary="step B", data={"iteration": 1})
            program.add_predicted(graph, "C", "B", 0.6, cost={"tokens": 40}, summary="step C")
            program.add_predicted(graph, "D", "B", 0.5, summary="step D")
            program.add_predicted(graph, "E", "c001", 0.3, summary="step E", data={"iteration": 1})
            step = Proposal(None, program_source(0.45), "step B", prediction=Prediction(score=0.35, std=0.05), node="B")
            return [
                Proposal(
                    "c002",
                    program_source(0.6),
                    "step C",
                    prediction=Prediction(score=0.6),
                    node="C",
                    intermediates=[step],
                ),
                Proposal(
                    "c002",
                    program_source(0.4),
                    "step D",
                    prediction=Prediction(score=0.5),
                    node="D",
                    intermediates=[step],
                ),
            ]
        assert "E" in graph.nx and graph.node("E").status == program.PREDICTED
        return [Proposal("c001", program_source(0.25), "step E", prediction=Prediction(score=0.3), node="E")]


def program_source(score):
    return program(score)


def _git(run_dir, *args):
    import subprocess

    return subprocess.run(["git", "-C", str(run_dir), *args], capture_output=True, text=True, check=True).stdout


def test_a_chain_commits_its_intermediate_as_the_parent_and_predictions_last_across_iterations(tmp_path):
    from metaharness.store import program_graph

    evaluator = FakeEvaluator()
    proposer = ChainProposer()
    run, opt = make(tmp_path, proposer, evaluator, iterations=2)
    opt.run()
    run.close()
    records = {c.id: c for c in run.candidates()}
    assert list(records) == ["c001", "c002", "c003", "c004", "c005", "c006"]
    b, c, d, e = records["c003"], records["c004"], records["c005"], records["c006"]
    assert b.implemented and not b.evaluated and b.evaluation is None and b.parent == "c002"
    assert (c.parent, d.parent, e.parent) == ("c003", "c003", "c001")  # B committed once, shared by C and D
    assert c.prediction.node == "C" and b.prediction == Prediction(score=0.35, std=0.05, node="B")
    assert [cid for cid, _ in evaluator.evaluated] == ["c001", "c002", "c004", "c005", "c006"]  # B not evaluated
    # git's parents are the revisions: C's commit's parent is B's commit (B has no result), B's is c002's result
    # commit (c002 was scored when B was committed), a sibling of c002's own commit
    sha = {cid: _git(run.path, "rev-parse", f"{cid}^{{commit}}").strip() for cid in records}
    assert _git(run.path, "rev-parse", "c004^").strip() == sha["c003"]
    assert _git(run.path, "rev-parse", "c003^").strip() == _git(run.path, "rev-parse", "results/c002").strip()
    assert _git(run.path, "rev-parse", "results/c002^").strip() == _git(run.path, "rev-parse", "c002^").strip()
    assert _git(run.path, "log", "--graph", "--format=%s", "results/c004").splitlines() == [
        "* c004 [0.600] step C",
        "* c003 [implemented] step B",
        "* c002 [0.300] seed: few",
        "* metaharness run: toy with task model fake",
    ]
    assert _git(run.path, "rev-parse", "c005^").strip() == sha["c003"]
    note = _git(run.path, "notes", "--ref=metaharness", "show", "c003")
    assert "implemented, not evaluated yet" in note and "predicted val 0.3500 +- 0.0500, node B" in note
    # best, frontier and the iteration line ignore the implemented candidate but list it
    assert run.store.best().id == "c004"
    line = {r["iteration"]: r for r in run.log_records("iteration")}[1]
    assert line["candidates"] == ["c003", "c004", "c005"] and line["implemented"] == 1 and line["evaluated"] == 2
    assert "c003" not in line["frontier"]
    assert "| c003 | 1 | c002 | implemented |" in run.summary_md.read_text()
    # the lasting graph: realised nodes relabelled to their candidates, predictions kept, E chosen in iteration 2
    graph = program_graph.load(run.path)
    assert graph is not None
    assert graph.node("c003").status == "implemented" and graph.node("c003").score == 0.35
    assert graph.node("c004").status == "evaluated" and graph.node("c004").score == pytest.approx(0.6)
    assert graph.node("c004").data["prediction"]["score"] == 0.6 and graph.node("c006").data["predicted_in"] == 1
    assert {x.source for x in graph.in_edges("c004")} == {"c003"}
    assert graph.node("c006").status == "evaluated" and "E" not in graph.nx
    assert proposer.states[1].graph.node("c004").status == "evaluated"


def test_plan_entries_order_chains_share_steps_and_reuse_what_is_committed():
    from metaharness.search.plan import plan_entries

    def p(name, parent="c001", steps=(), node=None):
        return Proposal(parent, f"# {name}", name, node=node if node is not None else name, intermediates=list(steps))

    def shape(entries):
        return [(e.id, e.summary, e.parent, e.evaluate, e.node) for e in entries]

    b = p("b", parent=None)
    # C's intermediate B is evaluated by another proposal: B is planned first, as that proposal, and C revises it
    assert shape(plan_entries([p("c", steps=[b]), p("b")], 10, {})) == [
        ("c010", "b", "c001", True, "b"),
        ("c011", "c", "c010", True, "c"),
    ]
    # two chains through the same B (by node) share one implemented B; a step without a node is its own candidate
    anonymous = Proposal(None, "# x", "x")
    assert shape(plan_entries([p("c", steps=[b]), p("d", steps=[b, anonymous])], 1, {})) == [
        ("c001", "b", "c001", False, "b"),
        ("c002", "c", "c001", True, "c"),
        ("c003", "x", "c001", False, None),
        ("c004", "d", "c003", True, "d"),
    ]
    # a step realised in an earlier iteration (by node, or named by its candidate id) is not planned again
    realised = {"b": "c004", "c004": "c004", "c005": "c005"}
    assert shape(plan_entries([p("c", steps=[b]), p("e", steps=[p("c005", parent=None)])], 7, realised)) == [
        ("c007", "c", "c004", True, "c"),
        ("c008", "e", "c005", True, "e"),
    ]
    # evaluating a node that a committed candidate realised: its program again, as that candidate's child
    (again,) = plan_entries([p("b", parent="c001")], 9, realised)
    assert (again.parent, again.node, again.prediction) == ("c004", None, None)
    assert plan_entries([p("c", steps=[b])], 1, {})[1].prediction == Prediction(node="c")
