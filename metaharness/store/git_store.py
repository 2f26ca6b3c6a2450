"""The candidate store: a git repository in which every candidate is a commit, and every result it gets another.

Layout of the repository (the run directory is its working tree):

- ``refs/tags/root``: the run's root commit (``run.json``: task, models, limits). Seeds hang off it.
- ``refs/tags/cNNN``: the candidate's own commit, written when it passes its check (``files_of``: its program and
  ``candidate.json``, status ``implemented``; subject ``cNNN [implemented] summary``). An intermediate step of a
  chosen revision chain (A -> B -> C) is its own commit and stays ``implemented``, so ``git log --graph`` is the
  program graph.
- ``refs/heads/results/cNNN``: the candidate's current result in plain git. Each time its evaluation grows (a stage
  of the staged evaluation) or it fails when run, a *result commit* is written and the branch moves to it: the same
  program, ``candidate.json`` with the status, ``evaluation.json``, subject ``cNNN [0.500] summary``
  (``[0.667 (3/4)]`` while partly scored, ``[failed]``), the result as trailers (``Score``, ``Examples``,
  ``Supported``, ...) and ``Result-Of: cNNN``. Its parent is the parent of the candidate's own commit (the newest
  commit of the candidate it revises when it was committed, or ``root`` for a seed), so ``git show`` of a result
  commit shows the harness diff against the revised program together with the score, and ``git log -p`` of it walks
  the line of revisions. A revision's commit hangs off its parent's newest commit (its latest result commit, else
  its own), so ``git log`` of any candidate shows its ancestors with their scores.
- ``refs/notes/metaharness``: a git note on each candidate's own commit with its scores, as readable lines and as
  one ``evaluation-json:`` line that ``GitStore.candidates`` reads back, and the readable lines on its newest result
  commit; the test-split result is added to both at the end of a run. The run's git config names this ref
  (``core.notesRef``), so plain ``git notes show best``, ``git log`` and ``git show`` show the notes.
- ``refs/heads/best``: the newest commit of the best supported candidate (scored on every example of the search's
  share): its result commit, so ``git show best`` shows its score and its harness diff; ``HEAD`` points at it, so
  the working tree holds the best harness.

Crash safety: objects are written first (a kill leaves at most unreachable objects, which git ignores), then the
candidate's tag or result branch, the notes ref and ``best`` move in one ``git update-ref --stdin`` transaction
(``metaharness.store.git_plumbing`` writes the objects, the notes and the transaction):
all or nothing. A candidate (or a result of it) is therefore either fully committed, with its note and best ref, or
absent. The working tree is synced afterwards; ``GitStore.clean_interrupted`` repairs a sync or any git command cut
short by a kill.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
from gitdb.exc import ODBError

from metaharness import frontier
from metaharness.candidate import CANDIDATE_ID, EVALUATED, FAILED, Candidate, Evaluation, Prediction, id_number
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.errors import InputError
from metaharness.store.crash import crash_point
from metaharness.store.git_plumbing import NOTES_REF, ZERO_SHA, GitObjects, NotesRef
from metaharness.text import json_text

ROOT_REF = "refs/tags/root"
BEST_REF = "refs/heads/best"
RESULTS_PREFIX = "refs/heads/results/"
CONFIG_FILE = "run.json"
METADATA_FILE = "candidate.json"
EVALUATION_FILE = "evaluation.json"
# The order of a candidate's files in a diff (``git show``, ``git log -p``): the program first.
DIFF_ORDER = (HARNESS_FILE, EVALUATION_FILE, METADATA_FILE)
DIFF_ORDER_FILE = "metaharness-diff-order"
# Everything in the run directory except the committed files stays out of git (traces, journal, summaries).
EXCLUDES = ["/*", f"!/{HARNESS_FILE}", f"!/{METADATA_FILE}", f"!/{EVALUATION_FILE}", f"!/{CONFIG_FILE}"]


@dataclass
class StoredCandidate:
    """A committed candidate with its own commit's sha, its note and its newest result commit (``None`` before any
    result)."""

    candidate: Candidate
    commit: str
    note: str = ""
    result: str | None = None


def result_ref(cid: str) -> str:
    """The branch of candidate ``cid``'s result commits."""
    return f"{RESULTS_PREFIX}{cid}"


def files_of(candidate: Candidate) -> dict[str, str]:
    """The files of a candidate's commit, by name: the program, its metadata and (once evaluated) its evaluation."""
    files = {
        HARNESS_FILE: candidate.source,
        METADATA_FILE: json_text(candidate.metadata(), indent=2, sort_keys=True) + "\n",
    }
    if candidate.evaluation is not None:
        files[EVALUATION_FILE] = json_text(candidate.evaluation.to_dict(), indent=2, sort_keys=True) + "\n"
    return files


def prediction_text(prediction: Prediction | None) -> str:
    """The proposer's prediction in one line (``predicted val 0.4200 +- 0.0500, node n3``); empty when none."""
    prediction = prediction or Prediction()
    parts = []
    if prediction.score is not None:
        std = prediction.std
        parts.append(
            f"predicted val {float(prediction.score):.4f}"
            + (f" +- {float(std):.4f}" if std is not None and std else "")
        )
    if prediction.cost:
        parts.append("predicted cost " + " ".join(f"{k} {v}" for k, v in sorted(prediction.cost.items())))
    if prediction.node is not None:
        parts.append(f"node {prediction.node}")
    return ", ".join(parts)


NOTE_EVALUATION = "evaluation-json: "
CANDIDATE_TRAILER = re.compile(r"^Candidate: (\S+)$", re.MULTILINE)
# The trailer that marks a result commit (``Result-Of: cNNN``): the candidate's own commit has none.
RESULT_TRAILER = re.compile(r"^Result-Of: (\S+)$", re.MULTILINE)
NOTE_FAILURE = "failure-json: "


def examples_text(evaluation: Evaluation) -> str:
    """On how many examples a result rests: ``scored on 4 of the 4 search examples, 0 with errors``; a partly scored
    one says it is not a result yet."""
    ev = evaluation
    if not ev.share:
        return f"scored on {ev.examples} {ev.split} examples, {ev.errors} with errors"
    partly = "" if ev.supported else " so far (partly scored: not a result yet)"
    return f"scored on {ev.examples} of the {ev.share} search examples{partly}, {ev.errors} with errors"


def render_note(candidate: Candidate, test: Evaluation | None = None) -> str:
    """The note git shows under a candidate's commit: scores first (and on which examples), then cost, then where
    it came from; last, the evaluation as one JSON line (``note_evaluation`` reads it back)."""
    predicted = prediction_text(candidate.prediction)
    ev = candidate.evaluation if candidate.evaluated else None
    if candidate.failed:
        lines = [f"FAILED: {(candidate.error or 'unknown error').strip().splitlines()[0][:200]}"]
    elif ev is None:
        lines = ["implemented, not evaluated yet"]
    else:
        others = "  ".join(f"{k} {v:.4f}" for k, v in sorted(ev.scores.items()) if k != "primary")
        lines = [
            f"val {candidate.result(4)}" + (f"  ({others})" if others else ""),
            examples_text(ev),
            f"context {ev.cost.get('context_tokens', 0):.0f} tok/example  "
            f"tokens {ev.cost.get('input_tokens', 0):.0f} in "
            f"{ev.cost.get('output_tokens', 0):.0f} out  ${ev.cost.get('usd', 0):.4f}",
        ]
        if ev.increments:
            stages = ", ".join(f"+{i.examples} in iteration {i.iteration}" for i in ev.increments)
            lines.append(f"stages: {stages}")
        if ev.example_ids:
            lines.append("examples: " + " ".join(ev.example_ids))
    if predicted:
        lines.append(predicted)
    if test is not None:
        lines.append(f"test {test.primary:.4f}  ({test.examples} test examples, {test.errors} with errors)")
    lines.append(f"iteration {candidate.iteration}, parent {candidate.parent or 'root'}")
    if ev is not None:
        lines.append(NOTE_EVALUATION + json.dumps(ev.to_dict(), sort_keys=True, separators=(",", ":")))
    elif candidate.failed:
        lines.append(NOTE_FAILURE + json.dumps({"error": candidate.error or ""}, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def readable_note(note: str) -> str:
    """A note without its machine-readable lines (what ``metaharness show`` prints)."""
    keep = [line for line in note.splitlines() if not line.startswith((NOTE_EVALUATION, NOTE_FAILURE))]
    return "\n".join(keep) + "\n"


def candidate_notes(own: str, result: str | None, note: str) -> dict[str, str]:
    """The notes of a candidate: ``note`` on its own commit (read back by ``GitStore.candidates``), its readable lines
    on its newest result commit (what ``git notes show best`` prints)."""
    return {own: note, **({result: readable_note(note)} if result is not None else {})}


def note_evaluation(note: str) -> Evaluation | None:
    """The evaluation a note records (its ``evaluation-json:`` line), or None."""
    for line in note.splitlines():
        if line.startswith(NOTE_EVALUATION):
            return Evaluation.from_dict(json.loads(line[len(NOTE_EVALUATION) :]))
    return None


def with_note(candidate: Candidate, note: str) -> Candidate:
    """``candidate`` as its note says it is now: evaluated as the note records, or failed after its commit (its
    harness could not run when it was scored)."""
    if candidate.failed:
        return candidate
    for line in note.splitlines():
        if line.startswith(NOTE_FAILURE):
            error = json.loads(line[len(NOTE_FAILURE) :]).get("error", "")
            return dataclasses.replace(candidate, status=FAILED, error=error, evaluation=None)
    evaluation = note_evaluation(note)
    if evaluation is None:
        return candidate
    return dataclasses.replace(candidate, status=EVALUATED, evaluation=evaluation)


def commit_message(candidate: Candidate, *, result: bool = False) -> str:
    """Subject ``cNNN [result] summary`` (``Candidate.result``, so ``--oneline`` shows it), the hypothesis and on
    how many examples the result rests, then the facts as git trailers (a result commit's last: ``Result-Of``)."""
    subject = (candidate.summary or "candidate").strip().splitlines()[0] if candidate.summary.strip() else "candidate"
    trailers = [
        ("Candidate", candidate.id),
        ("Parent", candidate.parent or "root"),
        ("Iteration", str(candidate.iteration)),
        ("Status", candidate.status),
    ]
    ev = candidate.evaluation if candidate.evaluated else None
    if ev is not None:
        trailers.append(("Score", f"{candidate.score:.4f}"))
        trailers += [(f"Score-{k}", f"{v:.4f}") for k, v in sorted(ev.scores.items()) if k != "primary"]
        trailers.append(("Examples", f"{ev.examples}/{ev.share}" if ev.share else str(ev.examples)))
        trailers.append(("Supported", "yes" if ev.supported else "no"))
        trailers.append(("Context-Tokens", f"{ev.cost.get('context_tokens', 0):.0f}"))
        trailers.append(("Cost-USD", f"{ev.cost.get('usd', 0):.6f}"))
    if candidate.error:
        trailers.append(("Error", candidate.error.strip().splitlines()[0][:200]))
    prediction = candidate.prediction or Prediction()
    if prediction.score is not None:
        trailers.append(("Predicted-Score", f"{float(prediction.score):.4f}"))
    if prediction.std is not None:
        trailers.append(("Predicted-Std", f"{float(prediction.std):.4f}"))
    if prediction.node is not None:
        trailers.append(("Node", prediction.node))
    if result:
        trailers.append(("Result-Of", candidate.id))
    parts = [f"{candidate.id} [{candidate.result()}] {subject[:72]}"]
    body = "\n\n".join(text for text in (candidate.hypothesis.strip(), examples_text(ev) if ev else "") if text)
    if body:
        parts.append(body)
    parts.append("\n".join(f"{k}: {v}" for k, v in trailers))
    return "\n\n".join(parts) + "\n"


class GitStore:
    """Candidates as git commits in the repository at ``path`` (see the module docstring)."""

    def __init__(self, repo: git.Repo) -> None:
        self.repo = repo
        if repo.working_tree_dir is None:
            raise InputError(f"{repo.git_dir} is a bare git repository, not a metaharness run directory.")
        self.path = Path(repo.working_tree_dir)
        self.objects = GitObjects(repo)
        self.notes = NotesRef(self.objects)
        self._cache: dict[str, Candidate] = {}

    # -- creating and opening -------------------------------------------------------------------------------

    @classmethod
    def init(cls, path: Path, config: Mapping[str, object]) -> GitStore:
        """Create the repository and its root commit holding ``run.json``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(path)
        (Path(repo.git_dir) / "info").mkdir(exist_ok=True)
        (Path(repo.git_dir) / "info" / "exclude").write_text("\n".join(EXCLUDES) + "\n")
        repo.git.symbolic_ref("HEAD", BEST_REF)
        store = cls(repo)
        store._configure()
        tree = store.objects.tree({CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True) + "\n"})
        message = f"metaharness run: {config.get('dataset', '?')} with task model {config.get('task_model', '?')}\n"
        root = store.objects.commit(tree, message, [])
        store.objects.update_refs([(ROOT_REF, root, ZERO_SHA)])
        return store

    @classmethod
    def open(cls, path: Path) -> GitStore:
        try:
            repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise InputError(f"{path} is not a metaharness run directory (no git repository there).") from exc
        store = cls(repo)
        if store.objects.resolve(ROOT_REF) is None:
            raise InputError(f"{path} is a git repository but not a metaharness run (it has no 'root' tag).")
        store._configure()
        return store

    def _configure(self) -> None:
        """The run's git config for plain git (a run made before it had it gets it when opened): the notes ref
        (``core.notesRef``), so ``git notes show best`` and ``git log`` read the scores, and the program first in
        every diff (``diff.orderFile``). A repository that cannot be written keeps its config."""
        order = Path(self.repo.git_dir) / DIFF_ORDER_FILE
        # Relative to the working tree, so the run directory can move.
        wanted = {"core.notesRef": NOTES_REF, "diff.orderFile": f".git/{DIFF_ORDER_FILE}"}
        try:
            if not order.exists():
                order.write_text("".join(f"{name}\n" for name in DIFF_ORDER))
            for key, value in wanted.items():
                if self.repo.git.config("--get", key, with_exceptions=False) != value:
                    self.repo.git.config(key, value)
        except (OSError, git.GitCommandError):  # a read-only run directory: plain git then needs --ref metaharness
            pass

    @staticmethod
    def exists(path: Path) -> bool:
        return (Path(path) / ".git").exists()

    def config(self) -> dict[str, Any]:
        return json.loads(self.repo.commit(ROOT_REF).tree[CONFIG_FILE].data_stream.read())

    # -- writing ---------------------------------------------------------------------------------------------

    def commit(self, candidate: Candidate) -> str:
        """Commit ``candidate`` atomically (candidate ref, note and best in one transaction); returns the sha."""
        if not CANDIDATE_ID.match(candidate.id):
            raise ValueError(f"bad candidate id {candidate.id!r}")
        parent = self.objects.resolve(ROOT_REF) if candidate.parent is None else self._newest(candidate.parent)
        if parent is None:
            raise ValueError(f"parent {candidate.parent!r} of {candidate.id} is not committed")
        tree = self.objects.tree(files_of(candidate))
        sha = self.objects.commit(tree, commit_message(candidate), [parent])
        notes = self.notes.write({sha: render_note(candidate)})
        crash_point("commit:objects-written")
        updates = [(f"refs/tags/{candidate.id}", sha, ZERO_SHA), notes]
        updates += self._best_update(candidate, sha)
        self.objects.update_refs(updates)
        self._cache[sha] = candidate
        crash_point("commit:refs-updated")
        self.sync_worktree()
        return sha

    def record_evaluation(self, cid: str, evaluation: Evaluation) -> Candidate:
        """Record candidate ``cid``'s evaluation as it stands now (a result commit, its note, and ``best`` when it
        becomes the best supported candidate) in one transaction; returns the candidate as recorded."""
        stored = self.get(cid)
        candidate = dataclasses.replace(stored.candidate, status=EVALUATED, evaluation=evaluation)
        sha, result = self._result_commit(stored, candidate)
        notes = self.notes.write(candidate_notes(stored.commit, sha, render_note(candidate)))
        self.objects.update_refs([result, notes, *self._best_update(candidate, sha)])
        crash_point("evaluation:recorded")
        self.sync_worktree()
        return candidate

    def record_failure(self, cid: str, error: str) -> Candidate:
        """Record that committed candidate ``cid`` cannot run (a result commit ``[failed]`` and its note)."""
        stored = self.get(cid)
        candidate = dataclasses.replace(stored.candidate, status=FAILED, error=error, evaluation=None)
        sha, result = self._result_commit(stored, candidate)
        notes = self.notes.write(candidate_notes(stored.commit, sha, render_note(candidate)))
        self.objects.update_refs([result, notes])
        return candidate

    def _result_commit(self, stored: StoredCandidate, candidate: Candidate) -> tuple[str, tuple[str, str, str]]:
        """Write the commit of ``candidate``'s result, on the parent of its own commit (so its diff is the revision);
        returns its sha and the move of its result branch, for the caller's ref transaction."""
        tree = self.objects.tree(files_of(candidate))
        base = [p.hexsha for p in self.repo.commit(stored.commit).parents]
        sha = self.objects.commit(tree, commit_message(candidate, result=True), base)
        return sha, (result_ref(candidate.id), sha, stored.result or ZERO_SHA)

    def _best_update(self, candidate: Candidate, sha: str) -> list[tuple[str, str, str]]:
        """The move of ``best`` to ``sha`` when ``candidate`` is supported and beats the best by
        ``metaharness.frontier.rank`` (ties: the earlier), or is the best and ``sha`` its newer commit."""
        best = self.best()
        current = self.objects.resolve(BEST_REF)
        if not candidate.supported or current == sha:
            return []
        if best is not None and best.id != candidate.id and frontier.rank(candidate) <= frontier.rank(best):
            return []
        return [(BEST_REF, sha, current or ZERO_SHA)]

    def annotate(self, cid: str, note: str) -> None:
        """Replace the note of candidate ``cid`` (e.g. to add its test-split result), on its newest result commit
        too."""
        sha = self.objects.resolve(f"refs/tags/{cid}")
        if sha is None:
            raise KeyError(cid)
        self.objects.update_refs([self.notes.write(candidate_notes(sha, self.objects.resolve(result_ref(cid)), note))])

    def sync_worktree(self) -> None:
        """Make the working tree hold the best candidate's files (HEAD is ``best``)."""
        if self.objects.resolve(BEST_REF) is not None:
            self.repo.git.reset("--hard", "-q")

    def clean_interrupted(self) -> list[str]:
        """Repair what a kill can leave behind: stale git lock files and a half-synced working tree.

        Call only while holding the run lock (no other metaharness process uses the repository).
        """
        actions = []
        git_dir = Path(self.repo.git_dir)
        for lock in sorted(p for p in git_dir.rglob("*.lock") if "objects" not in p.relative_to(git_dir).parts):
            lock.unlink(missing_ok=True)
            actions.append(f"removed stale git lock {lock.relative_to(self.path)}")
        for tmp in (git_dir / "objects").glob("obj*"):  # an object write cut short (LooseObjectDB's temp files)
            tmp.unlink(missing_ok=True)
            actions.append(f"removed unfinished object write {tmp.name}")
        if self.repo.git.symbolic_ref("-q", "HEAD", with_exceptions=False) != BEST_REF:
            self.repo.git.symbolic_ref("HEAD", BEST_REF)
            actions.append("pointed HEAD back at the 'best' branch")
        if self.objects.resolve(BEST_REF) is not None and self.repo.is_dirty(untracked_files=False):
            self.sync_worktree()
            actions.append("restored the working tree to the best candidate")
        return actions

    def restore_tags(self) -> list[str]:
        """Tag again every candidate commit whose tag is gone (deleted by hand), from the commit itself; one note
        each."""
        actions = []
        for cid, sha in self.untagged().items():
            self.objects.update_refs([(f"refs/tags/{cid}", sha, ZERO_SHA)])
            actions.append(f"restored the missing tag {cid} from its commit {sha[:10]} (with its note)")
        return actions

    # -- reading ---------------------------------------------------------------------------------------------

    def claimed(self) -> dict[str, str]:
        """Candidate id -> own commit of every candidate git still holds, tagged or not: reachable from a ref, or
        named by a note (every candidate's commit gets its note in the same transaction as its tag). A result
        commit (``Result-Of``; in a run from before that trailer, one whose parent is a commit of the same
        candidate) is not the candidate's own."""
        shas = set(self.repo.git.rev_list("--all").split()) | set(self.notes.blobs())
        named: dict[str, str] = {}
        parents: dict[str, str | None] = {}
        for sha in sorted(shas):
            try:
                commit = self.repo.commit(sha)
            except ValueError:  # a note of a commit git no longer holds
                continue
            cid = self._claim(sha)
            if cid is not None and not RESULT_TRAILER.search(str(commit.message)):
                named[sha] = cid
                parents[sha] = commit.parents[0].hexsha if commit.parents else None
        return {cid: sha for sha, cid in named.items() if named.get(parents[sha] or "") != cid}

    def _claim(self, sha: str) -> str | None:
        """The candidate id commit ``sha``'s ``Candidate:`` trailer names, if any."""
        trailer = CANDIDATE_TRAILER.search(str(self.repo.commit(sha).message))
        return trailer.group(1) if trailer and CANDIDATE_ID.match(trailer.group(1)) else None

    def candidates(self) -> list[StoredCandidate]:
        """Every committed candidate, in id order."""
        notes = self.notes.texts()
        refs = self.repo.git.for_each_ref("--format=%(refname) %(objectname)", "refs/tags", RESULTS_PREFIX)
        results = {}
        found = []
        for line in refs.splitlines():
            name, sha = line.split()
            if name.startswith(RESULTS_PREFIX):
                results[name[len(RESULTS_PREFIX) :]] = sha
            elif CANDIDATE_ID.match(cid := name[len("refs/tags/") :]):
                note = notes.get(sha, "")
                found.append(StoredCandidate(with_note(self._record(sha, cid), note), sha, note))
        for stored in found:
            stored.result = results.get(stored.candidate.id)
        return sorted(found, key=lambda c: id_number(c.candidate.id))

    def untagged(self) -> dict[str, str]:
        """Candidate id -> commit of each candidate commit without its tag, in id order: its trailer and its
        ``candidate.json`` name the same id, and no tag does."""
        tagged = {c.candidate.id for c in self.candidates()}
        found = sorted(self.claimed().items(), key=lambda item: id_number(item[0]))
        return {cid: sha for cid, sha in found if cid not in tagged and self._record(sha).id == cid}

    def get(self, cid: str) -> StoredCandidate:
        sha = self.objects.resolve(f"refs/tags/{cid}")
        if sha is None:
            known = ", ".join(c.candidate.id for c in self.candidates()) or "none yet"
            raise InputError(f"No candidate '{cid}' in {self.path} (candidates: {known}).")
        note = self.notes.texts().get(sha, "")
        result = self.objects.resolve(result_ref(cid))
        return StoredCandidate(with_note(self._record(sha, cid), note), sha, note, result)

    def has(self, cid: str) -> bool:
        return self.objects.resolve(f"refs/tags/{cid}") is not None

    def best(self) -> Candidate | None:
        """The candidate ``best`` points at (its result commit, or its own commit in a run from before result
        commits)."""
        sha = self.objects.resolve(BEST_REF)
        if sha is None:
            return None
        cid = self._claim(sha)
        if cid is not None and self.has(cid):
            return self.get(cid).candidate
        return with_note(self._record(sha), self.notes.texts().get(sha, ""))

    def _newest(self, cid: str) -> str | None:
        """Candidate ``cid``'s newest commit: its latest result commit, else its own (``None``: not committed)."""
        own = self.objects.resolve(f"refs/tags/{cid}")
        return None if own is None else self.objects.resolve(result_ref(cid)) or own

    def _record(self, sha: str, cid: str | None = None) -> Candidate:
        """The candidate commit ``sha`` (of candidate ``cid``, when known) holds; a commit whose files cannot be read
        is one clear error."""
        if sha not in self._cache:
            try:
                tree = self.repo.commit(sha).tree
                meta = json.loads(tree[METADATA_FILE].data_stream.read())
                source = tree[HARNESS_FILE].data_stream.read().decode("utf-8")
                evaluation = None
                if EVALUATION_FILE in tree:
                    evaluation = json.loads(tree[EVALUATION_FILE].data_stream.read())
                self._cache[sha] = Candidate.from_dict({**meta, "source": source, "evaluation": evaluation})
            except (KeyError, ValueError, TypeError, AttributeError, zlib.error, ODBError, git.GitError) as exc:
                raise self._unreadable(sha, cid, exc) from None
        return self._cache[sha]

    def _unreadable(self, sha: str, cid: str | None, exc: Exception) -> InputError:
        """What to say of a candidate commit whose files cannot be read (changed by hand, or a damaged object)."""
        if cid is None:
            try:
                cid = self._claim(sha)
            except (ValueError, zlib.error, ODBError, git.GitError):
                cid = None
        tag = cid or "cNNN"
        return InputError(
            f"The commit {sha[:10]} of {cid or 'a candidate'} in {self.path} cannot be read (its {METADATA_FILE}, "
            f"{HARNESS_FILE} or {EVALUATION_FILE} is damaged: {type(exc).__name__}: {str(exc)[:160]}). Restore the "
            f"run directory from a backup, or point the tag at an intact commit of the candidate (git -C {self.path} "
            f"tag -f {tag} SHA; git -C {self.path} fsck checks the objects)."
        )
