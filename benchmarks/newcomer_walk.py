"""A newcomer's walk through the README, checked: set up, a small run, browsing with the CLI and plain git, the report
in a real browser, and one total for cost everywhere.

In a fresh folder, with a fresh response cache and this interpreter (the project's virtual environment, where the
README's install command ran; point ``PYTHONPATH`` at a clean checkout to walk a commit):

1. ``metaharness --version`` (the install);
2. the README's run, ``metaharness optimize --dataset symptom2disease --iters 2 --val-limit 10``, with
   ``--data-dir`` (no network here), first with ``--dry-run`` and then for real (``estimate_vs_run.py``: the
   estimate against what the run spent);
3. browsing as the README says: ``history``, ``show best``, ``diff`` of the best against its parent, ``report``,
   then plain git in the run directory (``git show best``, ``git log --graph --oneline --branches --tags``,
   ``git notes show best``, ``git log -p best -- harness.py``);
4. ``report.html`` opened in headless Chromium (Debian's ``chromium``): screenshots of its top and of its cost
   section (the page with its other sections hidden);
5. the checks: every command exits 0; ``git show best`` shows the best's score and a harness diff; ``git notes show
   best`` its note; the run's total tokens are the same in ``spend.jsonl``, ``SUMMARY.md``, the report's Spent box
   and the last point of its cost chart.

It writes ``walk.md`` (every command, its exit code, time and output), ``git-show-best.txt``, ``SUMMARY.md``, the
estimate's files and the screenshots to ``--out``, and exits 1 when a check fails.

    python benchmarks/newcomer_walk.py --data-dir DATA [--out reports/newcomer]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark

from estimate_vs_run import Step, compare, load, metaharness, table  # noqa: E402

README_RUN = ["--dataset", "symptom2disease", "--iters", "2", "--val-limit", "10"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def git(run: Path, *args: str) -> Step:
    done = subprocess.run(["git", *args], cwd=run, capture_output=True, text=True)
    return Step(["git", *args], done.stdout, done.stderr, done.returncode, 0.0)


def screenshot(page: Path, png: Path, height: int, home: Path, hide: str = "") -> None:
    """``page`` in headless Chromium, the top ``height`` pixels at 1280 wide; ``hide``: CSS of what to hide first
    (on a copy of the page)."""
    assert CHROMIUM is not None, "install Debian's chromium (apt-get install -y chromium)"
    shown = page
    if hide:
        shown = home / f"{png.stem}.html"
        shown.write_text(page.read_text(encoding="utf-8").replace("</head>", f"<style>{hide}</style></head>", 1))
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={home / 'profile'}",
        "--virtual-time-budget=3000",
        f"--window-size=1280,{height}",
        f"--screenshot={png}",
        shown.as_uri(),
    ]
    subprocess.run(argv, capture_output=True, timeout=180, env={**os.environ, "HOME": str(home)}, check=True)


def totals(run: Path) -> dict[str, str]:
    """The run's total tokens where a reader sees it: spend.jsonl, SUMMARY.md, the report's Spent box and chart."""
    lines = [json.loads(x) for x in (run / "spend.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    page = html.unescape((run / "report.html").read_text(encoding="utf-8"))
    summary = (run / "SUMMARY.md").read_text(encoding="utf-8")
    box = re.search(r"<td>everything \(spend.jsonl\)</td><td></td><td>([\d,]+)</td>", page)
    chart = re.findall(r"the whole run \(spend.jsonl\): ([\d,]+) tokens|after iteration \d+: ([\d,]+) tokens", page)
    row = re.search(r"\| everything \(spend.jsonl\) \|  \| ([\d,]+) \|", summary)
    return {
        "spend.jsonl": f"{sum(int(x.get('tokens', 0)) for x in lines):,}",
        "SUMMARY.md": row.group(1) if row else "missing",
        "report: Spent box": box.group(1) if box else "missing",
        "report: cost chart's last point": next(filter(None, chart[-1])) if chart else "missing",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="Folder with the paper's splits (no network here).")
    parser.add_argument("--out", type=Path, default=Path("reports/newcomer"))
    given = parser.parse_args()
    args = [*README_RUN, "--data-dir", str(Path(given.data_dir).resolve())]
    out = given.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    steps: list[Step] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        env = {**os.environ, "METAHARNESS_CACHE_DIR": str(work / "cache"), "COLUMNS": "160"}
        started_load = load()
        steps.append(metaharness("--version", cwd=work, env=env))
        dry, run, estimate, real = compare(args, work, env)
        steps += [dry, run]
        run_dir = work / "runs" / "symptom2disease-offline"
        best = json.loads(git(run_dir, "show", "best:candidate.json").stdout)
        steps.append(metaharness("history", cwd=work, env=env))
        steps.append(metaharness("show", "best", cwd=work, env=env))
        if best.get("parent"):
            steps.append(metaharness("diff", best["parent"], best["id"], cwd=work, env=env))
        steps.append(metaharness("report", cwd=work, env=env))
        shown = git(run_dir, "show", "best")
        note = git(run_dir, "notes", "show", "best")
        steps += [shown, git(run_dir, "log", "--graph", "--oneline", "--branches", "--tags"), note]
        steps.append(git(run_dir, "log", "-p", "best", "--", "harness.py"))
        failed += [" ".join(s.argv) for s in steps if s.code != 0]
        if "diff --git a/harness.py" not in shown.stdout or "Score: " not in shown.stdout:
            failed.append("git show best shows no harness diff or no score")
        if not note.stdout.startswith("val "):
            failed.append("git notes show best shows no note")
        screenshot(run_dir / "report.html", out / "report-top.png", 1400, work)
        screenshot(run_dir / "report.html", out / "report-cost.png", 900, work, "body>section:not(#cost){display:none}")
        seen = totals(run_dir)
        if len(set(seen.values())) != 1:
            failed.append(f"the totals disagree: {seen}")
        data = str(Path(given.data_dir).resolve())

        def scrub(text: str) -> str:
            """The text with the machine's paths written DATA and WORK."""
            return text.replace(data, "DATA").replace(str(work), "WORK")

        (out / "git-show-best.txt").write_text(f"$ git show best\n{shown.stdout}", encoding="utf-8")
        (out / "SUMMARY.md").write_text(scrub((run_dir / "SUMMARY.md").read_text(encoding="utf-8")), encoding="utf-8")
        (out / "estimate.txt").write_text(scrub(f"$ {' '.join(dry.argv)}\n{dry.stdout}"), encoding="utf-8")
        walk = [
            "# A newcomer's walk through the README",
            "",
            f"`python benchmarks/newcomer_walk.py --data-dir DATA` (load average {started_load} at the start, "
            f"{load()} at the end; the data folder's path is written DATA below).",
            "",
            "## The dry-run estimate against the run",
            "",
            table(estimate, real),
            "",
            "## The run's total tokens where a reader sees it",
            "",
            *(f"- {where}: {value}" for where, value in seen.items()),
            "",
            "## Checks",
            "",
            *(f"- FAILED: {f}" for f in failed),
            *(
                []
                if failed
                else [
                    "- every command exited 0; git show best shows the score and the harness diff; "
                    "git notes show best the note; the four totals agree"
                ]
            ),
            "",
            "## Every command",
        ]
        for step in steps:
            text = scrub(step.stdout + step.stderr)
            walk += [
                "",
                f"`{' '.join(step.argv)}`: exit {step.code}, {step.seconds:.0f} s",
                "",
                "```text",
                text.rstrip(),
                "```",
            ]
        (out / "walk.md").write_text(scrub("\n".join(walk)) + "\n", encoding="utf-8")
    print("\n".join(walk[:24]))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
