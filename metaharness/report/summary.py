"""``SUMMARY.md``: the human-readable summary of a run, rewritten after every iteration."""

from __future__ import annotations

from pathlib import Path

from metaharness.planner.program import PREDICTED
from metaharness.report.view import ALLOTMENT_HEADERS, PREDICTED_HEADERS, RunView, cost_cell, cost_of
from metaharness.store.files import atomic_write_text
from metaharness.store.run_dir import RunDirectory
from metaharness.text import markdown


def prediction_rows(view: RunView) -> tuple[list[str], list[list[str]], float | None]:
    """Predicted vs. actual score of every candidate with a result that carried a prediction, and the mean absolute
    error (a partly scored candidate has no actual score yet: ``unjudged_notes``)."""
    rows = []
    for r, predicted in view.predicted():
        std = r.prediction.std if r.prediction is not None else None
        rows.append(
            [
                r.id,
                str(r.iteration),
                f"{predicted:.3f}",
                f"{float(std):.3f}" if std is not None else "",
                f"{r.score:.3f}",
                f"{r.score - predicted:+.3f}",
            ]
        )
    return ["id", "iteration", "predicted", "std", "actual", "actual - predicted"], rows, view.prediction_error()


def unjudged_notes(view: RunView) -> list[str]:
    """The predicted candidates left out of the comparison because they are only partly scored."""
    waiting = view.unjudged()
    if not waiting:
        return []
    listed = ", ".join(f"{r.id} {r.result()}" for r in waiting)
    return [f"Not compared, partly scored (no actual score yet): {listed}."]


COST_LEGEND = (
    "What each iteration's validation evaluations were predicted to spend, and spent, in what the run was charged "
    "(example-evaluations with a new model call, task-model tokens, dollars; a call the run had already made is "
    "free). The proposer's own calls (probes, the proposer model) count in the run's spend, not here."
)


def cost_rows(view: RunView) -> tuple[list[str], list[list[str]]]:
    """Per iteration: the predicted and the realised spend of its evaluations, entry by entry."""
    rows = [
        [
            str(it),
            _amount((predicted or {}).get("evals"), "{:.0f}"),
            _amount(realised.get("evals"), "{:.0f}"),
            _amount((predicted or {}).get("tokens"), "{:.0f}"),
            _amount(realised.get("tokens"), "{:.0f}"),
            _amount((predicted or {}).get("usd"), "{:.4f}"),
            _amount(realised.get("usd"), "{:.4f}"),
        ]
        for it, predicted, realised in view.iteration_costs()
    ]
    headers = [
        "iteration",
        "predicted evals",
        "realised evals",
        "predicted tokens",
        "realised tokens",
        "predicted USD",
        "realised USD",
    ]
    return headers, rows


def _amount(value: object, form: str) -> str:
    return form.format(float(value)) if isinstance(value, (int, float)) else ""


def render_markdown(view: RunView) -> str:
    cfg = view.config
    iterations = sorted(it for it in view.iterations() if it > 0)
    failed = view.proposer_failures()
    lines = [
        f"# metaharness run: {cfg.get('dataset')}",
        "",
        f"- task model: `{cfg.get('task_model')}`; proposer: `{cfg.get('proposer')}`"
        + (f" (`{cfg['proposer_model']}`)" if cfg.get("proposer_model") else ""),
        f"- validation examples: {cfg.get('val_limit') or 'all'} searched"
        + held_out_note(view)
        + f"; evaluation: {cfg.get('evaluation', 'best-of-n')}, {cfg.get('evals_per_iter')} full evaluations' worth "
        "of examples per iteration",
        f"- iterations done: {max(iterations, default=0)}"
        + (f" (the proposer failed {len(failed)} times and was asked again)" if failed else "")
        + f"; candidates: {len(view.records)} ({sum(r.failed for r in view.records)} failed"
        + (f", {partial} partly scored" if (partial := sum(r.partial for r in view.records)) else "")
        + (
            f", {implemented} implemented, not scored)"
            if (implemented := sum(r.implemented for r in view.records))
            else ")"
        ),
        "- the best and the front are chosen among candidates with a result: scored on every search example "
        "(a partly scored one shows on how many, `0.667 (3/4)`)",
        "",
        "## At a glance",
        "",
        f"- **Tried:** {view.tried()}",
        f"- **Won:** {markdown(view.won())}",  # it quotes the best's summary
    ]
    if predicted := prediction_story(view):
        lines.append(f"- **Predicting:** {predicted}")
    rows, notes = view.spend_story()
    lines += ["- **Spent:** " + "; ".join(notes), ""] + markdown_table(["", "evals", "tokens", "USD"], rows)
    best = view.best
    if best:
        lines += ["", "## Best", "", f"`{best.id}` val {best.result(4)}: {markdown(best.summary)}  "]
        if best.id in view.test:
            lines.append(f"test {view.test[best.id].primary:.4f} on {view.test[best.id].examples} examples  ")
        confirm = best.evaluation.confirm if best.evaluation is not None else None
        if confirm is not None:
            lines.append(
                f"confirmed {confirm.primary:.4f} on {confirm.examples} held-out examples that chose it among the "
                "search's best  "
            )
        folds = best.evaluation.folds if best.evaluation is not None else None
        if folds is not None:
            lines.append(
                f"training folds {folds.primary:.4f} on {folds.examples} training examples, each predicted by the "
                "program built on the other folds with no model call (weighed with its other scores in choosing it)  "
            )
        if best.id in view.holdout:
            judged = view.holdout[best.id]
            lines.append(
                f"held-out val {judged.primary:.4f} on {judged.examples} examples no proposer saw and nothing was "
                "chosen by  "
            )
        lines.append(f"Its program: `git -C {view.path} show best:harness.py`")
    lines += judgement_lines(view)
    lines += ["", "## Pareto front (val score vs. context tokens per example vs. USD)", ""]
    lines += ["| id | val | test | context tok | USD | summary |", "|---|---|---|---|---|---|"]
    for r in view.front:
        test = f"{view.test[r.id].primary:.4f}" if r.id in view.test else ""
        lines.append(
            f"| {r.id} | {r.result(4)} | {test} | {cost_of(r, 'context_tokens'):.0f} | {cost_of(r, 'usd'):.4f} | "
            f"{markdown_cell(r.summary)} |"
        )
    lines += ["", "## Candidates", ""]
    lines += [
        "| id | iteration | parent | val | predicted | context tok | USD | summary / error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in view.records:
        predicted = f"{r.prediction.score:.3f}" if r.prediction is not None and r.prediction.score is not None else ""
        text = r.summary + (f" -- {r.error.splitlines()[0]}" if r.failed and r.error else "")
        lines.append(
            f"| {r.id} | {r.iteration} | {r.parent or 'root'} | {r.result()} | {predicted} | "
            f"{cost_cell(r, 'context_tokens', '{:.0f}')} | {cost_cell(r, 'usd', '{:.4f}')} | {markdown_cell(text)} |"
        )
    headers, rows, error = prediction_rows(view)
    if rows:
        lines += ["", f"## Predicted vs. actual score (mean absolute error {error:.3f} over {len(rows)})", ""]
        lines += markdown_table(headers, rows)
    lines += [f"\n{n}" for n in unjudged_notes(view)]
    headers, rows = cost_rows(view)
    if rows:
        lines += ["", "## Predicted vs. realised cost per iteration", ""]
        lines += [COST_LEGEND]
        lines += [""] + markdown_table(headers, rows)
    allotments = view.allotments()
    if allotments:
        lines += ["", "## Staged evaluation: examples allotted per iteration", ""]
        lines += markdown_table(ALLOTMENT_HEADERS, allotments)
    if free := free_evidence_rows(view):
        lines += ["", "## Free evidence, and spend on outputs the run already had", "", FREE_LEGEND, ""]
        lines += markdown_table(FREE_HEADERS, free)
    waiting = view.predicted_rows()
    if waiting:
        lines += ["", f"## Predicted programs not yet chosen ({len(waiting)}; `metaharness history --predicted`)", ""]
        lines += markdown_table(PREDICTED_HEADERS, waiting[:20])
        if len(waiting) > 20:
            lines.append(f"\n({len(waiting) - 20} more in `program-graph.json`)")
    if failed:
        lines += ["", "## Proposer failures (each iteration was asked again)", ""]
        lines += [f"- iteration {it}: {markdown_cell(error, 300)}" for it, error in failed]
        lines.append("  (the tracebacks: `proposer_traceback` in the `proposer_failure` lines of `summary.jsonl`)")
    if view.notes():
        lines += ["", "## Notes", ""] + [f"- {markdown(n)}" for n in view.notes()]
    lines += [
        "",
        "## Browse",
        "",
        f"- the search tree with scores: `git -C {view.path} log --graph --oneline --branches --tags` (every "
        f"candidate is a commit, every result a commit on `results/cNNN`); the best, its score and its harness diff: "
        f"`git -C {view.path} show best`",
        "- one candidate: `metaharness show cNNN`; a revision: `metaharness diff cAAA cBBB`; "
        "plots: `metaharness report`",
        "- machine-readable record: `summary.jsonl`; per-example traces: `traces/`",
        "",
    ]
    return "\n".join(lines)


def markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table; every cell goes through ``markdown_cell``."""
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows),
    ]


def markdown_cell(text: str, width: int = 120) -> str:
    """``text`` as one table cell: at most ``width`` characters of it, made inert (``metaharness.text.markdown``:
    one line, no HTML, no link, no emphasis, ``|`` escaped). A proposer's summary or a harness's error may be
    anything."""
    return markdown(" ".join(text.split())[:width], block_start=False)


FREE_HEADERS = [
    "iteration",
    "scored with no model call",
    "replayed",
    "check runs (seconds)",
    "evals charged to identical outputs",
    "identical to an earlier candidate",
]
FREE_LEGEND = (
    "A candidate's examples where its outputs do not depend on the model's answers are scored with no model call "
    "(all of them: model-free), those whose calls the run already made are replayed; both cost nothing. The last "
    "columns count the example-evaluations charged to candidates whose outputs equal an earlier candidate's on "
    "every example they were scored on (what the run paid for outputs it already had), and name them."
)


def free_evidence_rows(view: RunView) -> list[list[str]]:
    """Per iteration (its line): what was scored for free and what was charged to outputs the run already had."""
    rows = []
    for line in view.log:
        if line.get("type") != "iteration" or "checks" not in line:
            continue
        free, replayed = line.get("model_free") or {}, line.get("replayed") or {}
        checks, identical = line.get("checks") or {}, line.get("identical") or {}
        same = identical.get("same_as") or {}
        rows.append(
            [
                str(line.get("iteration")),
                _examples(free),
                _examples(replayed),
                f"{checks.get('runs', 0)} ({float(checks.get('seconds', 0.0)):.1f} s)",
                f"{float(identical.get('charged', 0.0)):g}",
                markdown_cell(", ".join(f"{a} = {b}" for a, b in same.items()) or "none", 300),
            ]
        )
    return rows


def _examples(scored: dict[str, int]) -> str:
    """``3 candidates, 30 examples``: candidates scored so and their examples in all."""
    if not scored:
        return "none"
    n = sum(int(v) for v in scored.values())
    return f"{len(scored)} candidate{'s' if len(scored) != 1 else ''}, {n} examples"


def prediction_story(view: RunView) -> str:
    """What predicting cost (task-model tokens of probes; sandbox time of the free checks) and what it saved: the
    examples scored with no model call or from recorded calls before any policy decided, and the revisions known
    exactly to behave as their base, so never proposed; and the training folds of the model-free contenders, with
    their sandbox time."""
    lines = [line for line in view.log if line.get("type") == "iteration" and "checks" in line]
    if not lines:
        return ""
    tokens = sum(float((line.get("spend") or {}).get("predict", {}).get("tokens", 0.0)) for line in lines)
    seconds = sum(float((line.get("checks") or {}).get("seconds", 0.0)) for line in lines)
    free = sum(int(v) for line in lines for v in (line.get("model_free") or {}).values())
    replayed = sum(int(v) for line in lines for v in (line.get("replayed") or {}).values())
    same = 0
    if view.graph is not None:
        same = sum(
            1
            for node in view.graph.nodes
            if node.status == PREDICTED
            and node.data.get("same_as_base")
            and node.data.get("predicted_by") in ("replay", "model-free")
        )
    folds = [line for line in view.log if line.get("type") == "folds"]
    folded = ""
    if folds:
        spent = sum(float(line["evaluation"].get("seconds", 0.0)) for line in folds)
        folded = (
            f"; {len(folds)} model-free contenders scored on training folds with no model call, in {spent:,.0f} s of "
            "sandbox time"
        )
    return (
        f"{tokens:,.0f} task-model tokens in probes and {seconds:,.0f} s of sandbox time in checks; saved "
        f"{free:,} example-evaluations scored with no model call and {replayed:,} from recorded calls, and "
        f"{same:,} revisions known to behave exactly as their base were never proposed{folded}"
    )


def held_out_note(view: RunView) -> str:
    """How many validation examples were held out of the search, from the run's held-out lines."""
    confirm = max(
        (len(line["evaluation"]["example_ids"]) for line in view.log if line.get("type") == "confirm"), default=0
    )
    judge = max((int(line.get("examples", 0)) for line in view.log if line.get("type") == "judgement"), default=0)
    if not confirm and not judge:
        return ""
    withheld = _withheld(view)
    return f", {confirm + judge} held out ({confirm} choose what the run returns, {judge} judge it{withheld})"


def _withheld(view: RunView) -> str:
    """What the judge examples hold of the training examples the run withheld (``--judge-train``), if any."""
    count = int(view.config.get("judge_train") or 0)
    return f", {count} of them training examples withheld from the run" if count else ""


def judgement_lines(view: RunView) -> list[str]:
    """The last judgement: the returned candidate, the best seed and the no-model baseline on the judge examples,
    paired (``metaharness.search.judgement``)."""
    found = [line for line in view.log if line.get("type") == "judgement"]
    if not found:
        return []
    last = found[-1]
    scores, baseline = last.get("scores") or {}, last.get("baseline") or {}
    lines = [
        "",
        f"## What the search bought (judged on {last.get('examples')} held-out examples nothing was chosen by"
        f"{_withheld(view)})",
        "",
    ]
    rows = [
        [name, str(entry.get("id") or "no model"), f"{float(entry.get('score', 0.0)):.4f}"]
        for name, entry in scores.items()
    ]
    lines += markdown_table(["", "candidate", "score"], rows)
    lines.append("")
    for c in last.get("comparisons") or []:
        low, high = c.get("interval", [0.0, 0.0])
        verdict = "above 0" if c.get("above_zero") else "not above 0"
        lines.append(
            f"- returned minus {c.get('over')}: {float(c.get('difference', 0.0)):+.4f}, 95% interval "
            f"[{float(low):+.4f}, {float(high):+.4f}] ({verdict})"
        )
    if baseline:
        lines.append(
            "- the baseline: a nearest-neighbour vote over the training labels with no model, tuned by leave-one-out "
            f"on the training examples ({', '.join(f'{k} {v}' for k, v in baseline.items())})"
        )
    return lines


def write_summary_markdown(run: RunDirectory) -> Path:
    atomic_write_text(run.summary_md, render_markdown(RunView.load(run)))
    return run.summary_md
