"""The three text tasks of the Meta-Harness paper as ``Task`` objects.

Each definition says which folder holds its splits (``train``, ``val``, ``test``; see ``.splits``), how a stored
row becomes an ``Example`` (``input`` is the raw question, ``target`` the gold answer
as the metric reads it), the task's description with its answer convention, and its metric (``.metrics``:
``"primary"`` is the paper's 0/1 metric, ``f1`` and ``jaccard`` are secondary).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from metaharness.errors import InputError
from metaharness.tasks.protocol import Example
from metaharness.tasks.text import metrics
from metaharness.tasks.text.splits import locate, read_rows

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class TextTask:
    """One benchmark: a data folder, how a row becomes an ``Example``, and the metric."""

    name: str
    folder: str
    description: str
    metric: Callable[[str, str], dict[str, float]]
    to_example: Callable[[str, dict[str, Any]], Example]
    data_dir: str | os.PathLike[str] | None = None
    splits: tuple[str, ...] = SPLITS

    def load(self, split: str) -> list[Example]:
        if split not in self.splits:
            raise InputError(f"Unknown split '{split}' for task {self.name}: use one of {', '.join(self.splits)}.")
        rows = read_rows(locate(f"{self.folder}/{split}.jsonl", self.data_dir))
        return [self.to_example(f"{split}-{index:04d}", row) for index, row in enumerate(rows)]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return self.metric(prediction if isinstance(prediction, str) else "", example.target)

    def metric_names(self) -> list[str]:
        return list(self.metric("", "x"))


def _lawbench_example(id: str, row: dict[str, Any]) -> Example:
    answer = row["answer"]
    target = answer.split("罪名:")[-1].strip() if "罪名:" in answer else answer.strip()
    return Example(id, row["question"], target, row)


def _symptom_example(id: str, row: dict[str, Any]) -> Example:
    return Example(id, row["question"], row["answer"], row)


def _uspto_example(id: str, row: dict[str, Any]) -> Example:
    return Example(id, row["question"], row["target"], row)


LAWBENCH_DESCRIPTION = """LawBench charge prediction (CAIL2018, Chinese criminal cases). Input: the facts of a case
("事实:..."). Output: the charge name(s) as written in Chinese criminal law, between [罪名] and <eoa>, several charges
separated by ";", e.g. [罪名]盗窃;诈骗<eoa>. Scored by set equality of charges with the gold set (F1 reported too).
Reference instruction: 请你模拟法官依据下面事实给出罪名，只需要给出罪名的名称，将答案写在[罪名]和<eoa>之间。"""

SYMPTOM2DISEASE_DESCRIPTION = """Symptom2Disease: a patient's description of symptoms (English) -> one of 22
diagnoses: drug reaction, allergy, chicken pox, diabetes, psoriasis, hypertension, cervical spondylosis, bronchial
asthma, varicose veins, malaria, dengue, arthritis, impetigo, fungal infection, common cold, gastroesophageal reflux
disease, urinary tract infection, typhoid, pneumonia, peptic ulcer disease, jaundice, migraine. Output:
[DIAGNOSIS]name[/DIAGNOSIS], e.g. [DIAGNOSIS]diabetes[/DIAGNOSIS]. Scored by exact match after lower-casing,
collapsing spaces and stripping trailing punctuation."""

USPTO_DESCRIPTION = """USPTO-50k single-step retrosynthesis. Input: the reaction type and the product SMILES
("Context: The reaction type is ...\\nInput: <product SMILES>\\nAnswer: "). Output: the reactant SMILES joined by
".", e.g. CC(=O)Cl.c1ccccc1O, either bare or as the "final_answer" field of a JSON object. Scored by equality of
the lower-cased sets of SMILES (Jaccard reported too)."""


# The tasks as defined; ``get_text_task`` adds where their data lives.
_DEFINITIONS: dict[str, TextTask] = {
    task.name: task
    for task in (
        TextTask("lawbench", "crime_prediction", LAWBENCH_DESCRIPTION, metrics.score_lawbench, _lawbench_example),
        TextTask(
            "symptom2disease",
            "symptom_diagnosis",
            SYMPTOM2DISEASE_DESCRIPTION,
            metrics.score_symptom2disease,
            _symptom_example,
        ),
        TextTask("uspto", "uspto", USPTO_DESCRIPTION, metrics.score_uspto, _uspto_example),
    )
}

TEXT_TASK_NAMES: tuple[str, ...] = tuple(_DEFINITIONS)


def get_text_task(name: str, data_dir: str | os.PathLike[str] | None = None) -> TextTask:
    key = name.strip().lower()
    if key not in _DEFINITIONS:
        raise InputError(f"Unknown task '{name}': use one of {', '.join(TEXT_TASK_NAMES)}.")
    return replace(_DEFINITIONS[key], data_dir=data_dir)
