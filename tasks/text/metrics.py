"""The paper's metrics for the three text tasks, as pure functions of (prediction, target).

They follow the Meta-Harness reference scorer (stanford-iris-lab/meta-harness,
``reference_examples/text_classification/data/evaluators.py`` at the commit pinned in ``.splits``):

- every prediction first goes through ``extract_final_answer``: a JSON object with a ``final_answer`` field
  (bare, inside a ```json fence, or embedded in prose) is replaced by that field; anything else is kept as is;
- LawBench: the charges between ``[罪名]`` and ``<eoa>`` (or after ``罪名:``), split on ``; ； , ， 、`` (see
  below), must equal the true set; F1, precision and recall of the two sets are reported too;
- Symptom2Disease: the text inside ``[DIAGNOSIS]...[/DIAGNOSIS]`` (else after ``diagnosis:``), lower-cased, runs
  of whitespace collapsed, trailing ``.!?`` stripped, must equal the normalised label;
- USPTO: predicted and true SMILES split on ``.``, stripped and lower-cased, compared as sets; Jaccard reported.

Charge names themselves contain ``、`` (``组织、强迫、引诱、容留、介绍卖淫``), so, like the reference, an answer is
split on the first separator kind present in the order ``; ； , ， 、``, not on all of them.

Every function returns ``{"primary": 0.0|1.0, ...secondary}``; higher is better.
"""

from __future__ import annotations

import json
import re

_JSON_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
_JSON_OBJECT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")


def _final_answer_field(text: str) -> str | None:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    if isinstance(data, dict) and "final_answer" in data:
        return str(data["final_answer"])
    return None


def extract_final_answer(text: str) -> str:
    """The ``final_answer`` field of a JSON answer (fenced, bare or embedded), else the text unchanged."""
    if not text:
        return ""
    stripped = text.strip()
    candidates = [stripped]
    fence = _JSON_FENCE.search(stripped)
    if fence:
        candidates.append(fence.group(1).strip())
    candidates.extend(match.group() for match in _JSON_OBJECT.finditer(stripped))
    for candidate in candidates:
        answer = _final_answer_field(candidate)
        if answer is not None:
            return answer
    return text


# ---------------------------------------------------------------- LawBench

_CHARGE_SEPARATORS = (";", "；", ",", "，", "、")
_CHARGE_SPAN = re.compile(r"\[罪名\](.*?)(?:<eoa>|$)")


def parse_charges(text: str) -> set[str]:
    """The set of charge names in ``[罪名]A;B<eoa>`` (or ``罪名:A;B``, or a bare ``A;B``)."""
    text = extract_final_answer(text).strip()
    span = _CHARGE_SPAN.search(text)
    if span:
        text = span.group(1).strip()
    elif "罪名:" in text:
        text = text.split("罪名:")[-1]
    text = re.sub(r"<eoa>.*", "", text).strip()
    separator = next((sep for sep in _CHARGE_SEPARATORS if sep in text), None)
    if separator is None:
        return {text} if text else set()
    return {part.strip() for part in text.split(separator) if part.strip()}


def score_lawbench(prediction: str, target: str) -> dict[str, float]:
    predicted, true = parse_charges(prediction), parse_charges(target)
    hits = len(predicted & true)
    precision = hits / len(predicted) if predicted else 0.0
    recall = hits / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"primary": float(predicted == true), "f1": f1, "precision": precision, "recall": recall}


# ---------------------------------------------------------------- Symptom2Disease

_DIAGNOSIS_TAG = re.compile(r"\[DIAGNOSIS\](.*?)\[/DIAGNOSIS\]", re.I | re.S)
_DIAGNOSIS_LINE = re.compile(r"(?:diagnosis|final diagnosis|conclusion)[:：]\s*([^\n]+)", re.I)


def normalize_diagnosis(text: str) -> str:
    text = re.sub(r"\s+", " ", text.lower().strip())
    return re.sub(r"[.!?]+$", "", text)


def parse_diagnosis(text: str) -> str:
    """The normalised diagnosis in ``[DIAGNOSIS]x[/DIAGNOSIS]`` (else after ``diagnosis:``, else the whole text)."""
    text = extract_final_answer(text)
    match = _DIAGNOSIS_TAG.search(text) or _DIAGNOSIS_LINE.search(text)
    if match:
        text = match.group(1)
    return normalize_diagnosis(text)


def score_symptom2disease(prediction: str, target: str) -> dict[str, float]:
    return {"primary": float(parse_diagnosis(prediction) == normalize_diagnosis(target))}


# ---------------------------------------------------------------- USPTO


def parse_smiles_set(text: str) -> set[str]:
    """Reactant SMILES as a set: split on ``.``, stripped, lower-cased, empty parts dropped."""
    return {part.strip().lower() for part in text.strip().split(".") if part.strip()}


def score_uspto(prediction: str, target: str) -> dict[str, float]:
    predicted, true = parse_smiles_set(extract_final_answer(prediction)), parse_smiles_set(target)
    if not predicted and not true:
        jaccard = 1.0
    elif not predicted or not true:
        jaccard = 0.0
    else:
        jaccard = len(predicted & true) / len(predicted | true)
    return {"primary": float(predicted == true), "jaccard": jaccard}
