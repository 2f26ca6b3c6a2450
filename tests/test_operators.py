"""The harness transformations: they apply to the seeds, keep the file valid, and change behaviour as they say.

Transformed harnesses are executed here with a scripted stand-in for the task model; that tests the generated
code's logic (the evaluator's sandbox runs it for real in the proposer tests).
"""

from __future__ import annotations

import re
import types

import pytest
from fakes import ScriptedLM

from metaharness.candidates import ROOT as SEEDS
from metaharness.errors import InputError
from metaharness.proposers.operators import ANSWER_CAP, FORMAT_SENTENCE, OPERATORS, applicable, get_operator, label_set

SEED_FILES = sorted(SEEDS.glob("*/*.py"))
LABELS = ["common cold", "dengue", "migraine"]
TRAIN = [
    {"id": "t0", "input": "runny nose sneezing sore throat", "target": "common cold"},
    {"id": "t1", "input": "high fever joint pain rash behind eyes", "target": "dengue"},
    {"id": "t2", "input": "throbbing headache light hurts nausea", "target": "migraine"},
    {"id": "t3", "input": "sneezing blocked nose mild cough", "target": "common cold"},
    {"id": "t4", "input": "fever rash severe joint pain", "target": "dengue"},
    {"id": "t5", "input": "one sided headache with aura", "target": "migraine"},
    {"id": "t6", "input": "stuffy nose sneezing tired", "target": "common cold"},
]


DENGUE = "[DIAGNOSIS]dengue[/DIAGNOSIS]"
COLD = "[DIAGNOSIS]common cold[/DIAGNOSIS]"


def load(source: str, reply: str, train=TRAIN):
    """Run a harness file as a module; its Harness gets a scripted lm that answers every call with ``reply``."""
    module = types.ModuleType("harness_under_test")
    exec(compile(source, "harness.py", "exec"), module.__dict__)
    lm = ScriptedLM(reply)
    return module, module.Harness(lm, train), lm


def seed(task: str, name: str) -> str:
    return (SEEDS / task / f"{name}.py").read_text()


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_applicable_operator_keeps_a_valid_harness(path) -> None:
    source = path.read_text()
    ops = applicable(source)
    assert {"snap_to_labels", "answer_format"} <= {op.name for op in ops}
    for op in ops:
        revision = op.apply(source)  # compiles, or apply raises
        assert revision.source != source and revision.summary and revision.operator == op.name


# What each operator leaves in the program it edits (retrieval sizes and answer caps are checked by value).
MARKERS = {
    "snap_to_labels": "def _predict_before_snap(",
    "neighbour_vote_3": "def _predict_before_vote3(",
    "neighbour_vote_7": "def _predict_before_vote7(",
    "neighbour_fallback": "def _predict_before_fallback(",
    "answer_format": FORMAT_SENTENCE.strip(),
    "label_list": "lm = _LabelHintLM(lm, _known_labels(train))",
    "balanced_shots": "train = _label_round_robin(train)",
}
SETS_K = ("more_retrieved", "fewer_retrieved", "retrieval_off")


def retrieval_k(source: str) -> int:
    return int(re.search(r"^K = (\d+)$", source, re.MULTILINE).group(1))


def shows(operator: str, before: str, after: str) -> bool:
    """Whether ``after`` carries the edit ``operator`` made to ``before``."""
    if operator in SETS_K:
        old, new = retrieval_k(before), retrieval_k(after)
        return {"more_retrieved": new > old, "fewer_retrieved": 0 < new < old, "retrieval_off": new == 0}[operator]
    if operator == "shorter_answers":  # no answer-length setting above the cap is left
        return get_operator(operator).applies(before) and not get_operator(operator).applies(after)
    return MARKERS[operator] in after and MARKERS[operator] not in before


@pytest.mark.parametrize("name", ["zero_shot", "few_shot", "retrieval"])
def test_operator_pairs_compose(name) -> None:
    """Revision chains of two: every composed program is a working harness that carries both edits."""
    source = seed("symptom2disease", name)
    pairs = 0
    for first in applicable(source):
        revision = first.apply(source).source
        for second in applicable(revision):
            composed = second.apply(revision).source
            chain = f"{name}: {first.name}, then {second.name}"
            module, harness, _ = load(composed, DENGUE)  # valid Python; Harness(lm, train) constructs
            assert isinstance(module.Harness, type) and isinstance(harness.predict(TRAIN[1]["input"]), str), chain
            assert shows(second.name, revision, composed), chain
            # two retrieval-size edits set the same constant: the second one decides its final value
            kept_in = revision if first.name in SETS_K and second.name in SETS_K else composed
            assert shows(first.name, source, kept_in), chain
            pairs += 1
    assert pairs >= 25


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_edits_keep_the_original_text(path) -> None:
    """Splicing, not regenerating: every original line except the renamed ``def predict`` survives verbatim."""
    source = path.read_text()
    revised = get_operator("snap_to_labels").apply(source).source
    kept = [line for line in source.splitlines() if "def predict(" not in line]
    new_lines = revised.splitlines()
    assert all(line in new_lines for line in kept)


@pytest.mark.parametrize(
    ("operator", "seed_name", "reply", "question", "answer"),
    [
        ("snap_to_labels", "few_shot", "Commn cold", "sneezing", COLD),  # a misspelt label is repaired
        ("snap_to_labels", "few_shot", "the patient has DENGUE!", "fever", DENGUE),
        ("neighbour_vote_3", "few_shot", "migraine", "sneezing runny nose stuffy nose", COLD),  # outvoted
        ("neighbour_vote_3", "few_shot", "dengue", "fever rash joint pain headache", DENGUE),  # its weight decides
        ("neighbour_fallback", "zero_shot", "I am not sure.", "throbbing headache with aura", "migraine"),
        ("neighbour_fallback", "zero_shot", DENGUE, "throbbing headache with aura", DENGUE),  # a label: kept
    ],
)
def test_post_processors_change_answers_as_they_say(operator, seed_name, reply, question, answer) -> None:
    revised = get_operator(operator).apply(seed("symptom2disease", seed_name)).source
    _, harness, _ = load(revised, reply)
    assert harness.predict(question) == answer


def test_answer_format_appends_to_the_instruction_constant() -> None:
    source = seed("symptom2disease", "zero_shot")
    module, _, _ = load(get_operator("answer_format").apply(source).source, "x")
    original, _, _ = load(source, "x")
    assert module.INSTRUCTION.startswith(original.INSTRUCTION)
    assert module.INSTRUCTION.endswith("no explanation before or after it.")
    assert not get_operator("answer_format").applies(get_operator("answer_format").apply(source).source)


def test_label_list_reaches_the_system_prompt() -> None:
    source = seed("lawbench", "zero_shot")  # no LABELS constant in this seed
    revised = get_operator("label_list").apply(source).source
    _, harness, lm = load(revised, "[罪名]盗窃<eoa>")
    harness.predict("事实: ...")
    system = lm.requests[0].messages[0]
    assert system["role"] == "system" and "Possible answers: common cold; dengue; migraine." in system["content"]


def test_balanced_shots_reorders_training_examples_round_robin() -> None:
    revised = get_operator("balanced_shots").apply(seed("symptom2disease", "few_shot")).source
    module, harness, _ = load(revised, "dengue")
    order = [item["target"] for item in module._label_round_robin(TRAIN)]
    assert order[:3] == ["common cold", "dengue", "migraine"]
    assert sorted(order) == sorted(item["target"] for item in TRAIN)


def test_answer_cap_and_retrieval_k() -> None:
    revised = get_operator("shorter_answers").apply(seed("symptom2disease", "zero_shot")).source
    _, harness, lm = load(revised, "dengue")
    harness.predict("fever")
    assert lm.requests[0].max_tokens == ANSWER_CAP

    source = seed("symptom2disease", "retrieval")
    assert "K = 16" in get_operator("more_retrieved").apply(source).source
    assert "K = 4" in get_operator("fewer_retrieved").apply(source).source
    off = get_operator("retrieval_off").apply(source)
    assert "K = 0" in off.source and "retrieval off" in off.summary
    _, harness, lm = load(off.source, "dengue")
    assert harness.predict("fever rash") == DENGUE
    assert not any("Symptoms: high fever" in m["content"] for m in lm.requests[0].messages)
    assert not get_operator("retrieval_off").applies(off.source)


def test_operators_refuse_what_they_cannot_edit() -> None:
    with pytest.raises(InputError, match="does not apply"):
        get_operator("more_retrieved").apply(seed("symptom2disease", "zero_shot"))
    assert applicable("def not_a_harness(): pass") == []
    assert applicable("class Harness:\n    def predict(self, x): return x\n") == []  # no __init__ hook
    assert applicable("this is not python(") == []
    with pytest.raises(InputError, match="Unknown operator"):
        get_operator("rewrite_everything")


def test_label_set_and_unlabelled_filter() -> None:
    assert label_set([i["target"] for i in TRAIN]) == LABELS
    assert label_set([f"answer {i}" for i in range(20)]) == []  # every answer distinct: not a label set
    names = {op.name for op in applicable(seed("uspto", "retrieval"), labelled=False)}
    assert "snap_to_labels" not in names and "more_retrieved" in names
    assert len({op.name for op in OPERATORS}) == len(OPERATORS)
