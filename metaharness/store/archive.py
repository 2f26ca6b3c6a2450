"""A run directory as files that can be committed, and back: how finished runs are kept under ``reports/``.

A run directory is a git repository with files beside it; a repository cannot be committed inside another one.
`archive` writes the repository as one `git bundle` (every ref: the candidates' commits, their result commits,
tags, the notes) next to copies of what a reader needs beside it (``summary.jsonl``, ``spend.jsonl``,
``settings.json``, ``program-graph.json``, ``SUMMARY.md``, the per-example traces, the test results and the
proposer's planning records); `restore` makes a run directory of it again, which every command and
``RunDirectory.browse`` read as the original. What is left out is what the run can rebuild or never reads again:
the work files (copies of the candidates' programs), the journal of an unfinished step, probe and replay scratch.

>>> archive("runs/s2d", "reports/my-study/s2d")  # doctest: +SKIP
>>> restore("reports/my-study/s2d", "/tmp/s2d")  # then: metaharness history --run-dir /tmp/s2d  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
from pathlib import Path

import git

from metaharness.errors import InputError
from metaharness.store.git_store import BEST_REF, EXCLUDES

BUNDLE = "repository.bundle"
# What an archive keeps beside the repository (files, and folders copied whole).
KEPT = (
    "summary.jsonl",
    "spend.jsonl",
    "settings.json",
    "program-graph.json",
    "SUMMARY.md",
    "traces",
    "evals",
    "proposer/planning",
)


def archive(run_dir: str | Path, out: str | Path) -> list[Path]:
    """Write run ``run_dir`` into the folder ``out`` (created; refused when it holds anything); returns what was
    written."""
    run, folder = Path(run_dir), Path(out)
    if not (run / ".git").exists():
        raise InputError(f"{run} is not a metaharness run directory (no git repository there).")
    if folder.exists() and any(folder.iterdir()):
        raise InputError(f"{folder} is not empty: archive a run into a new folder.")
    folder.mkdir(parents=True, exist_ok=True)
    git.Repo(run).git.bundle("create", str((folder / BUNDLE).resolve()), "--all")
    written = [folder / BUNDLE]
    for name in KEPT:
        source = run / name
        target = folder / name
        if source.is_dir():
            shutil.copytree(source, target)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        else:
            continue
        written.append(target)
    return written


def restore(archived: str | Path, into: str | Path) -> Path:
    """A run directory at ``into`` (a new folder) from an archive made by `archive`: every ref of the bundle, the
    best candidate checked out, the kept files beside it."""
    folder, run = Path(archived), Path(into)
    bundle = folder / BUNDLE
    if not bundle.is_file():
        raise InputError(f"{folder} holds no {BUNDLE}: it is no archived run.")
    if run.exists() and any(run.iterdir()):
        raise InputError(f"{run} is not empty: restore an archived run into a new folder.")
    repo = git.Repo.init(run)
    (Path(repo.git_dir) / "info").mkdir(exist_ok=True)
    (Path(repo.git_dir) / "info" / "exclude").write_text("\n".join(EXCLUDES) + "\n")
    repo.git.fetch(str(bundle.resolve()), "refs/*:refs/*")
    repo.git.symbolic_ref("HEAD", BEST_REF)
    if repo.git.rev_parse("--verify", "--quiet", BEST_REF, with_exceptions=False):
        repo.git.checkout("-f")
    for name in KEPT:
        source = folder / name
        if source.is_dir():
            shutil.copytree(source, run / name, dirs_exist_ok=True)
        elif source.is_file():
            (run / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, run / name)
    return run
