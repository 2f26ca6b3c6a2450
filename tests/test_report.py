"""SUMMARY.md and the self-contained HTML report; the page opens in headless Chromium without console errors."""

from __future__ import annotations

import re

import pytest
from browser import CHROMIUM, assert_renders_cleanly

from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.planner import program
from metaharness.report import RunView, write_report, write_summary_markdown
from metaharness.report.page import render_html
from metaharness.report.summary import render_markdown
from metaharness.report.svg import colour
from metaharness.store import RunDirectory
from metaharness.store.files import append_jsonl


def _rec(cid, parent, iteration, score, predicted=None, usd=0.0):
    ev = (
        None
        if score is None
        else Evaluation(
            "val",
            {"primary": score},
            {"context_tokens": 300 + 10 * iteration, "input_tokens": 1000, "output_tokens": 50, "usd": usd},
            5,
        )
    )
    return Candidate(
        cid,
        parent,
        iteration,
        "class Harness: pass\n",
        status="failed" if score is None else "evaluated",
        summary=f"<{cid}> & co",
        error="boom" if score is None else None,
        evaluation=ev,
        prediction=None if predicted is None else Prediction(score=predicted),
    )


@pytest.fixture
def run(tmp_path):
    rd = RunDirectory.open(
        tmp_path / "run", {"dataset": "toy", "task_model": "fake", "val_limit": 5, "proposer": "tps"}
    )
    for r in [
        _rec("c001", None, 0, 0.2),
        _rec("c002", None, 0, 0.3),
        _rec("c003", "c002", 1, 0.45, 0.4, 0.01),
        _rec("c004", "c002", 1, None, 0.5),
        _rec("c005", "c003", 2, 0.5, 0.6, 0.02),
    ]:
        rd.commit(r)
    graph = rd.graph.read()
    program.add_predicted(graph, "n1", "c005", 0.62, std=0.05, summary="n1 step", data={"iteration": 2})
    program.add_predicted(graph, "n2", "n1", 0.7, cost={"tokens": 3000, "usd": 0.03}, label=1, summary="n2 <step>")
    rd.graph.write(graph)
    step = Candidate("c006", "c005", 2, "class Harness: pass\n", status="implemented", summary="step to n1")
    step.prediction = Prediction(score=0.62, std=0.05, node="n1")
    rd.commit(step)
    for it in (0, 1, 2):
        predicted = {"evals": 2.0, "tokens": 900.0 * it, "usd": 0.004 * it}
        cost = {"predicted": predicted, "realised": {"evals": it % 2 + 1, "tokens": 1000 * it, "usd": 0.005}}
        spent = {"usd": 0.01 * it, "tokens": 1000 * it}
        staged = {
            "policy": "planner",
            "considered": ["c005", "c006"],
            "allotted": {"c005": [0, 5]},
            "alternatives": {"greedy": {"c005": 5, "c006": 5}, "halving": {"c005": 3, "c006": 3}},
        }
        append_jsonl(rd.summary_path, {"type": "iteration", "iteration": it, "spent": spent, "cost": cost, **staged})
    append_jsonl(rd.summary_path, {"type": "test_skipped", "reason": "no test split offline"})
    rd.save_split_result("c005", "test", Evaluation("test", {"primary": 0.42}, {}, 20))
    yield rd
    rd.close()


def test_html_is_self_contained_with_the_four_plots(run):
    page = render_html(RunView.load(run))
    assert page.count("<svg") == 5  # score, predicted vs actual, program graph, tokens, USD
    assert all(f"<section id='{part}'>" in page for part in ("glance", "scores", "graph", "cost", "tables"))
    assert "&lt;c003&gt; &amp; co" in page and "<c003>" not in page  # user text is escaped
    # nothing is fetched: no external scripts, styles, images or fonts
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "c005 0.500" in page and "0.420" in page  # tree label and the test score
    assert "no test split offline" in page


def test_the_page_draws_the_lasting_graph_and_compares_predictions_and_costs(run):
    page = render_html(RunView.load(run))
    graph = page[page.index("<h2>Program graph") : page.index("<h2>Cost over time")]
    assert "1 not yet chosen" in graph
    assert re.search(
        r'<circle [^>]*fill="#fff" stroke="#333" stroke-dasharray="3 2"><title>c006 \(implemented\)', graph
    )
    assert re.search(r'<circle [^>]*fill="#fff" stroke="#9a9a9a"><title>n2 \(predicted\): ~0.700', graph)
    assert "c006 implemented ~0.620" in graph and "n1 ~" not in graph and "c004 failed" in graph
    assert 'stroke-dasharray="4 3"' in graph  # the revisions into predicted programs
    assert "n2 &lt;step&gt;" in graph  # the revision's summary as a tooltip, escaped
    tables = page[page.index("<h2>Predicted vs. actual score of every candidate") :]
    # c003 predicted 0.4 measured 0.45, c005 predicted 0.6 measured 0.5 (c004 failed, c006 not evaluated)
    assert "<td>c003</td><td>1</td><td>0.400</td><td></td><td>0.450</td><td>+0.050</td>" in tables
    assert "<td>c005</td><td>2</td><td>0.600</td><td></td><td>0.500</td><td>-0.100</td>" in tables
    predictions = tables[: tables.index("Predicted vs. realised cost")]
    assert "mean absolute error 0.075 over 2 candidates" in predictions and "c006" not in predictions
    assert "<td>2</td><td>2</td><td>1</td><td>1800</td><td>2000</td><td>0.0080</td><td>0.0050</td>" in tables
    waiting = tables[tables.index("Predicted programs not yet chosen") :]
    assert "<td>n2</td><td>c006</td><td>0.700</td><td>goal</td><td>3000 tok $0.0300</td><td>1</td>" in waiting
    assert "<td>n1</td>" not in waiting  # realised by c006


def test_summary_markdown_lists_best_front_and_notes(run):
    text = render_markdown(RunView.load(run))
    assert "`c005` val 0.5000" in text and "test 0.4200" in text
    assert "| c004 | 1 | c002 | failed |" in text
    assert "git -C" in text and "test split not evaluated" in text
    assert "| c006 | 2 | c005 | implemented |" in text and "1 failed, 1 implemented, not scored" in text
    assert "## Predicted vs. actual score (mean absolute error 0.075 over 2)" in text
    assert "| 2 | 2 | 1 | 1800 | 2000 | 0.0080 | 0.0050 |" in text
    assert "## Staged evaluation: examples allotted per iteration" in text
    assert "| 2 | planner | 2 | c005 0->5 | 2 evals, 1,800 tok, $0.0080 | 1 evals, 2,000 tok, $0.0050 |" in text
    assert "| n2 | c006 | 0.700 | goal | 3000 tok $0.0300 | 1 |  | n2 &lt;step> |" in text  # a proposer's text: inert
    assert write_summary_markdown(run).read_text() == text


def test_colour_scale_runs_dark_to_bright():
    assert colour(0.0, 0.0, 1.0) == "#440154" and colour(1.0, 0.0, 1.0) == "#fde725"
    assert colour(0.5, 0.5, 0.5) == colour(0.7, 0.7, 0.7)  # a single score gets the middle colour


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (CI installs Debian's chromium)")
def test_report_opens_in_headless_chromium_without_errors(run, tmp_path):
    page = write_report(run, tmp_path / "report.html")
    assert_renders_cleanly(page, tmp_path)


def _partly_scored(run) -> None:
    """c007 revises c005 and scores 0.9 on 3 of its 5 examples so far: above the best, but no result yet."""
    step = Candidate("c007", "c005", 3, "class Harness: pass\n", status="implemented", summary="partly", trace=None)
    step.prediction = Prediction(score=0.8)
    run.commit(step)
    partial = Evaluation("val", {"primary": 0.9}, {"context_tokens": 200.0, "usd": 0.001}, 3, share=5)
    run.store.record_evaluation("c007", partial)


def test_a_partly_scored_candidate_shows_its_examples_and_never_counts_as_a_result(run):
    _partly_scored(run)
    view = RunView.load(run)
    assert (
        view.best is not None
        and view.best.id == "c005"
        and [(it, c.id) for it, c in view.best_so_far()]
        == [
            (0, "c002"),
            (1, "c003"),
            (2, "c005"),
        ]
    )
    page = render_html(view)
    top = page[: page.index("<h2>Validation score per iteration")]
    assert "best c005: val 0.500" in top
    assert "<h2>Tried</h2>" in top and "1 partly scored (no result yet)" in top and "<h2>Spent</h2>" in top
    assert "c005, val 0.500 on 5 search examples" in top and "c002 0.300 -&gt; c003 0.450 -&gt; c005 0.500" in top
    chart = page[page.index("<h2>Validation score per iteration") : page.index("<h2>Predicted vs. actual score")]
    assert "best after iteration 2: c005 0.500" in chart and "best after iteration 3" not in chart
    assert "c007: 0.900 (3/5) partly scored" in chart
    graph = page[page.index("<h2>Program graph") : page.index("<h2>Cost over time")]
    assert "c007 0.900 (3/5)</text>" in graph and "c007 (partly scored, no result yet)" in graph
    tables = page[page.index("<h2>Predicted vs. actual score of every candidate") :]
    predictions = tables[: tables.index("Predicted vs. realised cost")]
    assert (
        "<td>c007</td>" not in predictions
        and "Not compared, partly scored (no actual score yet): c007 0.900 (3/5)" in predictions
    )
    assert "mean absolute error 0.075 over 2 candidates" in predictions
    candidates = tables[tables.index("<h2>Candidates") :]
    assert "<td>c007</td><td>3</td><td>c005</td><td>0.900 (3/5)</td>" in candidates
    assert (
        "<td>c006</td><td>2</td><td>c005</td><td>implemented</td><td></td><td>0.620</td><td></td><td></td>"
        in candidates
    )
    costs = tables[tables.index("Predicted vs. realised cost") :]
    assert "<td>0</td><td></td><td>1</td><td></td><td>0</td><td></td><td>0.0050</td>" in costs  # seeds: no prediction
    text = render_markdown(view)
    assert (
        "`c005` val 0.5000" in text
        and "| c007 | 3 | c005 | 0.900 (3/5) |" in text
        and "| c006 | 2 | c005 | implemented | 0.620 |  |  |" in text
    )
    assert "- **Won:** c005, val 0.500 on 5 search examples" in text and "Not compared, partly scored" in text


def test_the_spend_story_splits_predicting_checking_and_measuring_against_the_budget(run):
    view = RunView.load(run)
    rows, notes = view.spend_story()  # the fixture's lines are from before the split: measuring only
    assert rows[0] == ["predicting", "not recorded", "", ""] and rows[2] == ["measuring", "4", "3,000", "$0.0150"]
    assert notes == ["run budget: no cap"]
    for it in (1, 2):
        spend = {"predict": {"evals": 3, "tokens": 400, "usd": 0.001}, "check": {"evals": 1, "tokens": 10, "usd": 0}}
        spend["measure"] = {"evals": 5, "tokens": 900, "usd": 0.002}
        line = {"type": "iteration", "iteration": it, "spent": {"usd": 0.02 * it, "tokens": 2000 * it}}
        append_jsonl(run.summary_path, {**line, "spend": spend, "budget": {"evals": 10, "tokens": None, "usd": None}})
    view = RunView.load(run)
    rows, notes = view.spend_story()
    assert rows[:3] == [
        ["predicting", "not recorded", "", ""],  # iteration 0's line has no split
        ["checking", "not recorded", "", ""],
        ["measuring", "11", "1,800", "$0.0090"],
    ]
    assert notes[1:] == [
        "iteration 1: predicting, checking and measuring spent 9 of 10 evals (its budget)",
        "iteration 2: predicting, checking and measuring spent 9 of 10 evals (its budget)",
    ]
    page = render_html(view)
    assert "<td>measuring</td><td>11</td><td>1,800</td><td>$0.0090</td>" in page[: page.index("<svg")]


def test_one_truth_for_cost_the_spent_box_the_chart_summary_and_spend_jsonl_agree(tmp_path):
    """Every place that totals the run's spend gives spend.jsonl's total; cached and replayed calls are free (their
    tokens shown apart, in no total); the task model's calls are never labelled the proposer's."""
    run = RunDirectory.open(tmp_path / "run", {"dataset": "toy", "task_model": "fake", "proposer": "offline"})
    cost = {"input_tokens": 9000.0, "output_tokens": 1000.0, "charged_tokens": 4000.0, "charged_examples": 2.0}
    seed = Evaluation("val", {"primary": 0.4}, {**cost, "context_tokens": 100.0}, 4, share=4)
    run.commit(Candidate("c001", None, 0, "class Harness: pass\n", status="evaluated", summary="s", evaluation=seed))
    free = {"input_tokens": 5000.0, "output_tokens": 500.0, "charged_tokens": 0.0, "charged_examples": 0.0}
    confirm = Evaluation("confirm", {"primary": 0.5}, {"input_tokens": 300.0, "charged_tokens": 300.0}, 2)
    replayed = Evaluation("val", {"primary": 0.7}, {**free, "context_tokens": 100.0}, 4, share=4, confirm=confirm)
    run.commit(
        Candidate("c002", "c001", 1, "class Harness: x = 1\n", status="evaluated", summary="r", evaluation=replayed)
    )
    for role, tokens in (("task", 4000), ("task", 1500), ("task", 300), ("task", 2500), ("task", 700)):
        run.spend.record("local:smollm2-135m", role, 0.0, input_tokens=tokens)
    for it, tokens in ((0, 4000), (1, 5500)):
        measure = {"evals": 2, "tokens": 4000 if it == 0 else 1500, "usd": 0}
        nothing = {"evals": 0, "tokens": 0, "usd": 0}
        split = {"predict": nothing, "check": nothing, "measure": measure}
        append_jsonl(
            run.summary_path,
            {"type": "iteration", "iteration": it, "spent": {"tokens": tokens, "usd": 0.0}, "spend": split},
        )
    charged = {"input_tokens": 2500.0, "output_tokens": 0.0, "charged_tokens": 2500.0, "charged_examples": 5.0}
    run.save_split_result("c002", "test", Evaluation("test", {"primary": 0.6}, charged, 5))
    # 700 more task-model tokens went to a test evaluation stopped before its result was saved
    view = RunView.load(run)
    rows, _ = view.spend_story()
    table = {row[0]: row[1:] for row in rows}
    assert table["measuring"] == ["4", "5,500", "$0.0000"] and table["the test split"] == ["5", "2,500", "$0.0000"]
    assert table["task-model calls of evaluations stopped before they were recorded"] == ["", "700", "$0.0000"]
    assert table["choosing and judging on held-out examples"] == ["2", "300", "$0.0000"]
    assert table["everything (spend.jsonl)"] == ["", "9,000", "$0.0000"] and run.spent()["tokens"] == 9000
    assert table["cached and replayed calls: free, in no total"] == ["6", "11,500", "$0.0000"]
    assert "the proposer model" not in table  # the offline proposer calls no model
    page = render_html(view)
    assert "the whole run (spend.jsonl): 9,000 tokens" in page  # the chart ends at the same total
    assert "<td>everything (spend.jsonl)</td><td></td><td>9,000</td>" in page
    assert "| everything (spend.jsonl) |  | 9,000 | $0.0000 |" in render_markdown(view)
    run.spend.record("anthropic:claude-sonnet-4-5", "proposer", 0.25, input_tokens=1000, output_tokens=200)
    table = {row[0]: row[1:] for row in RunView.load(run).spend_story()[0]}
    assert table["the proposer model"] == ["", "1,200", "$0.2500"] and table["everything (spend.jsonl)"][1] == "10,200"
    run.close()
