"""What an operator is, and the profile of a task's answers that decides which operators make sense for it."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from metaharness.errors import InputError
from metaharness.proposers.operators.editing import SourceEditor, harness_editor

# The list separators of multi-label answers, in the order the LawBench metric tries them. ``、`` is not one of
# them here: charge names contain it (``组织、强迫、引诱、容留、介绍卖淫``).
LIST_SEPARATORS = (";", "；", ",", "，")
_SMILES = re.compile(r"^[A-Za-z0-9@+\-\[\]()=#$%/\\.:*]+$")
_CJK = re.compile(r"[\u3400-\u9fff]")
# What every combined harness calls (``harness_pairing``): how a source is recognised as one.
COMBINED_MARK = "_load_harness("


@dataclass(frozen=True)
class Revision:
    """A transformed harness: the complete new source and what changed, in one line."""

    source: str
    summary: str
    operator: str


@dataclass(frozen=True)
class AnswerProfile:
    """What a task's training answers and inputs look like, read off the training split alone.

    ``labels``: distinct labels in the answers when they are labels (answers repeat; a multi-label answer counts
    each of its labels), else 0; ``multi_label``: answers often name several labels; ``smiles``: the answers are
    molecules (SMILES strings); ``cjk``: the inputs are mostly Chinese/Japanese characters (no spaces between
    words, so retrieval wants character n-grams).
    """

    labels: int = 0
    multi_label: bool = False
    smiles: bool = False
    cjk: bool = False

    @property
    def labelled(self) -> bool:
        return self.labels > 1


def label_atoms(answer: str) -> list[str]:
    """The labels one answer names: split on the first list separator present, stripped (the metric's rule)."""
    text = str(answer).strip()
    separator = next((s for s in LIST_SEPARATORS if s in text), None)
    return [p.strip() for p in (text.split(separator) if separator else [text]) if p.strip()]


def answer_profile(examples: Iterable[object]) -> AnswerProfile:
    """The ``AnswerProfile`` of training examples (objects with ``input`` and ``target``, or such dicts)."""
    rows = [(str(_field(e, "input")), str(_field(e, "target")).strip()) for e in examples]
    targets = [t for _, t in rows if t]
    if not targets:
        return AnswerProfile()
    cjk = sum(1 for x, _ in rows if len(_CJK.findall(x)) > len(x) / 3) > len(rows) / 2
    if all(_SMILES.match(t) and " " not in t for t in targets) and sum("." in t for t in targets) > len(targets) / 4:
        return AnswerProfile(smiles=True, cjk=cjk)
    atoms = [a for t in targets for a in label_atoms(t)]
    counts = Counter(atoms)
    multi = sum(len(label_atoms(t)) > 1 for t in targets) >= max(2, len(targets) // 10)
    repeated = sum(c for c in counts.values() if c > 1)
    # Labels repeat: at least a third of the mentions are of a label seen more than once (free text never does).
    labels = len(counts) if len(counts) > 1 and repeated >= len(atoms) / 3 else 0
    return AnswerProfile(labels=labels, multi_label=multi and labels > 0, smiles=False, cjk=cjk)


def _field(example: object, name: str) -> object:
    return example[name] if isinstance(example, dict) else getattr(example, name)


@dataclass(frozen=True)
class Operator:
    """A named transformation: ``applies(source, profile)`` says whether it can edit this harness for a task with
    these answers, ``apply(source)`` does it (the new source always compiles)."""

    name: str
    description: str
    _applies: Callable[[SourceEditor], bool]
    _apply: Callable[[str], tuple[str, str]]
    # For which tasks the revision means something (by their training answers); default: every task.
    fits: Callable[[AnswerProfile], bool] = lambda profile: True
    # Changes only what happens after the model answers: the model calls are the parent's (served from the cache).
    post_processing: bool = False
    # Operators made from one parameter grid share a family (``retrieve_k``: ``retrieve_k1``, ``retrieve_k2``, ...);
    # the offline proposer samples across families first, so one grid does not crowd out the others.
    family: str = ""

    @property
    def kind(self) -> str:
        """The operator's family, or its own name when it belongs to none."""
        return self.family or self.name

    def applies(self, source: str, profile: AnswerProfile | None = None) -> bool:
        editor = harness_editor(source)
        return editor is not None and self._applies(editor) and (profile is None or self.fits(profile))

    def apply(self, source: str) -> Revision:
        if not self.applies(source):
            raise InputError(f"Operator '{self.name}' does not apply to this harness source.")
        new_source, summary = self._apply(source)
        return Revision(new_source, summary, self.name)  # never a syntax error: checked for what is proposed


@dataclass(frozen=True)
class Combination:
    """A two-parent revision: ``combine(source, other, other_name)`` writes one harness from two (``source``, the
    revised candidate, and ``other``, its partner, named ``other_name`` in the summary and the new file) and
    returns (new source, summary). It never sees a partner by itself: the proposer picks one and binds it with
    ``partner(other_name, other_source)``, a plain one-parent ``Operator`` named ``<name>+<other_name>``, so every
    stage downstream (sampling, simulation, chains) handles operators of one parent only. ``post_processing``:
    the combined harness makes only calls its parents make, so where both were evaluated it replays from their
    recorded calls."""

    name: str
    description: str
    _combine: Callable[[str, str, str], tuple[str, str]]
    fits: Callable[[AnswerProfile], bool] = lambda profile: True
    post_processing: bool = True
    family: str = "combine"

    def combines(self, source: str, other: str) -> bool:
        """Whether the two are distinct harnesses, neither of them a combination already (files stay readable)."""
        return (
            source != other
            and all(harness_editor(text) is not None for text in (source, other))
            and not any(COMBINED_MARK in text for text in (source, other))
        )

    def partner(self, other_name: str, other_source: str) -> Operator:
        """The one-parent operator that combines a source with ``other_source``."""
        return Operator(
            f"{self.name}+{other_name}",
            f"{self.description} (with {other_name})",
            lambda editor: self.combines(editor.source, other_source),
            lambda source: self._combine(source, other_source, other_name),
            fits=self.fits,
            post_processing=self.post_processing,
            family=self.family,
        )
