"""A run directory as files that can be committed, and back: how finished runs are kept under ``reports/``.

A run directory is a git repository with files beside it; a repository cannot be committed inside another one.
`archive` writes the repository as one `git bundle` (every ref: the candidates' commits, their result commits,
tags, the notes) next to copies of what a reader needs beside it (``summary.jsonl``, ``spend.jsonl``,
``settings.json``, ``program-graph.json``, ``SUMMARY.md``, the per-example traces, the test results and the
proposer's planning records); `restore` makes a run directory of it again, which every command and
``RunDirectory.browse`` read as the original. What is left out is what the run can rebuild or never reads again:
the work files (copies of the candidates' programs), the journal of an unfinished step, probe and replay scratch.

An archived folder can be packed into one file, ``<name>.tar.xz`` (`pack`), so that a checkout holding many runs
stays small: its members in name order with one owner, mode and time, so the same folder packs to the same bytes.
`unpack` makes the folder of it again in a cache folder the caller names (never beside the archive), once per
archive's content; `restore` takes a packed archive as well as a folder.

>>> archive("runs/s2d", "reports/my-study/s2d")  # doctest: +SKIP
>>> pack("reports/my-study/s2d", "reports/my-study/s2d.tar.xz")  # doctest: +SKIP
>>> restore("reports/my-study/s2d", "/tmp/s2d")  # then: metaharness history --run-dir /tmp/s2d  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
from pathlib import Path

import git

from metaharness.errors import InputError
from metaharness.store.git_store import BEST_REF, EXCLUDES

BUNDLE = "repository.bundle"
PACKED = ".tar.xz"  # a packed archive's suffix
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


def pack(archived: str | Path, out: str | Path) -> Path:
    """Write the archived folder ``archived`` as one xz-compressed tar file ``out`` (ending in ``PACKED``), its
    members under the folder's name; the same folder always gives the same bytes. Returns ``out``."""
    folder, packed = Path(archived), Path(out)
    if not (folder / BUNDLE).is_file():
        raise InputError(f"{folder} holds no {BUNDLE}: archive the run first (metaharness.store.archive.archive).")
    if not packed.name.endswith(PACKED):
        raise InputError(f"{packed}: a packed archive's name ends in {PACKED}.")
    members = sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix())
    packed.parent.mkdir(parents=True, exist_ok=True)
    partial = packed.with_name(f".{packed.name}.partial")
    with tarfile.open(partial, "w:xz", format=tarfile.PAX_FORMAT, preset=9) as tar:
        for path in [folder, *members]:
            tar.add(
                path, arcname=(Path(folder.name) / path.relative_to(folder)).as_posix(), recursive=False, filter=_plain
            )
    partial.replace(packed)  # a reader never finds half a file
    return packed


def _plain(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """``member`` with nothing that depends on who packed it or when."""
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    member.mtime = 0
    member.mode = 0o755 if member.isdir() else 0o644
    return member


def unpack(packed: str | Path, cache: str | Path) -> Path:
    """The archived folder in ``packed`` (made by `pack`), unpacked under ``cache`` into a folder of its own named
    by the archive's name and content (so a changed archive is unpacked anew and an unchanged one once); returns
    the folder, named as the one packed. InputError when ``packed`` is no packed archive."""
    path = Path(packed)
    if not path.is_file() or not path.name.endswith(PACKED):
        raise InputError(f"{path} is no packed run archive (a file ending in {PACKED}, made by pack).")
    name = path.name[: -len(PACKED)]
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    home = Path(cache) / f"{name}-{digest.hexdigest()[:16]}"
    if not home.is_dir():
        home.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=home.parent))
        try:
            with tarfile.open(path, "r:xz") as tar:
                members = tar.getmembers()
                for member in members:
                    top, *_ = Path(member.name).parts or ("",)
                    if top != name or ".." in Path(member.name).parts or not (member.isfile() or member.isdir()):
                        raise InputError(f"{path} holds {member.name!r}: no archive made by pack, not unpacked.")
                tar.extractall(scratch, members=members, filter="data")
            scratch.rename(home)  # whole or not at all; another process may have won the race
        except OSError:
            if not home.is_dir():
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return home / name


def restore(archived: str | Path, into: str | Path, *, cache: str | Path | None = None) -> Path:
    """A run directory at ``into`` (a new folder) from an archive made by `archive`, or packed by `pack` (unpacked
    under ``cache`` first, a temporary folder when not given): every ref of the bundle, the best candidate checked
    out, the kept files beside it."""
    folder, run = Path(archived), Path(into)
    if folder.is_file():
        folder = unpack(folder, cache if cache is not None else tempfile.mkdtemp(prefix="metaharness-archive-"))
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
