"""The git plumbing under the candidate store: objects written in-process, refs moved in one transaction, the notes.

Blobs and trees are written by gitdb (temp file + rename, like git itself) and commits by GitPython, so a kill
leaves at most unreachable objects, which git ignores; the refs a step moves go in one ``git update-ref --stdin``
transaction, all or nothing. The scores' notes live on ``NOTES_REF`` as a tree of one blob per annotated commit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from io import BytesIO
from pathlib import Path

import git
from git.objects.fun import tree_to_stream
from gitdb import IStream, LooseObjectDB

from metaharness.text import utf8, visible

NOTES_REF = "refs/notes/metaharness"
ZERO_SHA = "0" * 40
BLOB_MODE = 0o100644
AUTHOR = git.Actor("metaharness", "metaharness@localhost")
# A ref move for ``GitObjects.update_refs``: (ref, new sha, old sha or ``ZERO_SHA`` for a ref that must not exist).
RefUpdate = tuple[str, str, str]


class GitObjects:
    """Writes the objects of the repository ``repo`` and moves its refs; reads go through git."""

    def __init__(self, repo: git.Repo) -> None:
        self.repo = repo
        self._db = LooseObjectDB(str(Path(repo.git_dir) / "objects"))

    def resolve(self, ref: str) -> str | None:
        """The sha ``ref`` points at (through symbolic refs), or None when it does not exist."""
        try:
            return git.SymbolicReference.dereference_recursive(self.repo, ref)
        except ValueError:
            return None

    def tree(self, files: Mapping[str, str | bytes]) -> str:
        """A flat tree of blobs; a ``bytes`` value is the binary sha of a blob that is already stored."""
        entries = []
        for name in sorted(files):
            content = files[name]
            binsha = content if isinstance(content, bytes) else self._store("blob", utf8(content)).binsha
            entries.append((binsha, BLOB_MODE, name))
        buffer = BytesIO()
        tree_to_stream(entries, buffer.write)
        return self._store("tree", buffer.getvalue()).hexsha.decode()

    def _store(self, kind: str, data: bytes) -> IStream:
        return self._db.store(IStream(kind, len(data), BytesIO(data)))

    def commit(self, tree: str, message: str, parents: list[str]) -> str:
        """A commit of ``tree``; its message is stored ``visible`` (``git log`` shows a summary or an error a model
        wrote inert, with no control character or lone surrogate)."""
        commit = git.Commit.create_from_tree(
            self.repo,
            tree,
            visible(message),
            parent_commits=[self.repo.commit(p) for p in parents],
            head=False,
            author=AUTHOR,
            committer=AUTHOR,
        )
        return commit.hexsha

    def update_refs(self, updates: list[RefUpdate]) -> None:
        """Move every ref in one transaction: all succeed or none does (``git update-ref --stdin``)."""
        with tempfile.TemporaryFile() as stdin:
            stdin.write("".join(f"update {ref} {new} {old}\n" for ref, new, old in updates).encode())
            stdin.seek(0)
            self.repo.git.update_ref("--stdin", istream=stdin)


class NotesRef:
    """The notes on ``NOTES_REF``: annotated commit sha -> note, as git reads them (``git notes show``)."""

    def __init__(self, objects: GitObjects) -> None:
        self.objects = objects

    def blobs(self) -> dict[str, bytes]:
        """Annotated commit sha -> binary sha of its note blob."""
        sha = self.objects.resolve(NOTES_REF)
        if sha is None:
            return {}
        blobs = (item for item in self.objects.repo.commit(sha).tree.traverse() if isinstance(item, git.Blob))
        return {str(blob.path).replace("/", ""): blob.binsha for blob in blobs}

    def texts(self) -> dict[str, str]:
        """Annotated commit sha -> note text."""
        odb = self.objects.repo.odb
        return {sha: odb.stream(blob).read().decode("utf-8") for sha, blob in self.blobs().items()}

    def write(self, changes: Mapping[str, str]) -> RefUpdate:
        """Write a notes commit with ``changes`` applied; returns the move of ``NOTES_REF`` to it, for the caller's
        ref transaction.

        The notes commit has no parent: git reads notes from the tree only, and one parentless commit keeps
        ``git log --all`` to a single extra line instead of a second history.
        """
        old = self.objects.resolve(NOTES_REF) or ZERO_SHA
        # Stored visible, as commit messages are (their JSON lines are ASCII already, so they read back the same).
        notes: dict[str, str | bytes] = {**self.blobs(), **{sha: visible(note) for sha, note in changes.items()}}
        tree = self.objects.tree(notes)
        new = self.objects.commit(tree, "metaharness: validation scores of every candidate (git notes)\n", [])
        return NOTES_REF, new, old
