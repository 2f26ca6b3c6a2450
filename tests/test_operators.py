"""The harness transformations: they apply to the seeds, keep the file valid, and change behaviour as they say.

Transformed harnesses are executed here with a scripted stand-in for the task model; that tests the generated
code's logic (the evaluator's sandbox runs it for real in the proposer tests).
"""

from __future__ import annotations

import types

import pytest

from metaharness.candidates import ROOT as SEEDS
from metaharness.errors import InputError
from metaharness.proposers.operators import OPERATORS, applicable, get_operator, label_set

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


class ScriptedLM:
    """Answers every call with ``reply`` and records the calls (what the harness asked for)."""

    context_window = 2048

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[dict] = []

    def __call__(self, prompt, *, system=None, max_tokens=512, temperature=0.0, stop=None):
        self.calls.append({"prompt": prompt, "system": system, "max_tokens": max_tokens})
        return self.reply


def load(source: str, reply: str, train=TRAIN):
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


@pytest.mark.parametrize("name", ["zero_shot", "few_shot", "retrieval"])
def test_operator_pairs_compose(name) -> None:
    """Revision chains of two: every applicable second operator still edits the first one's output."""
    source = seed("symptom2disease", name)
    for op in applicable(source):
        revision = op.apply(source)
        for second in applicable(revision.source):
            second.apply(revision.source)


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_edits_keep_the_original_text(path) -> None:
    """Splicing, not regenerating: every original line except the renamed ``def predict`` survives verbatim."""
    source = path.read_text()
    revised = get_operator("snap_to_labels").apply(source).source
    kept = [line for line in source.splitlines() if "def predict(" not in line]
    new_lines = revised.splitlines()
    assert all(line in new_lines for line in kept)


def test_snap_to_labels_repairs_a_misspelt_label() -> None:
    revised = get_operator("snap_to_labels").apply(seed("symptom2disease", "few_shot")).source
    _, harness, _ = load(revised, "Commn cold")
    assert harness.predict("sneezing") == "[DIAGNOSIS]common cold[/DIAGNOSIS]"
    _, harness, _ = load(revised, "the patient has DENGUE!")
    assert harness.predict("fever") == "[DIAGNOSIS]dengue[/DIAGNOSIS]"


def test_neighbour_vote_outvotes_a_wrong_answer_and_fallback_fills_a_blank() -> None:
    voted = get_operator("neighbour_vote_3").apply(seed("symptom2disease", "few_shot")).source
    _, harness, _ = load(voted, "migraine")
    assert harness.predict("sneezing runny nose stuffy nose") == "[DIAGNOSIS]common cold[/DIAGNOSIS]"
    _, harness, _ = load(voted, "dengue")  # the model agrees with one neighbour: its weight decides
    assert harness.predict("fever rash joint pain headache") == "[DIAGNOSIS]dengue[/DIAGNOSIS]"

    fallback = get_operator("neighbour_fallback").apply(seed("symptom2disease", "zero_shot")).source
    _, harness, _ = load(fallback, "I am not sure.")
    assert harness.predict("throbbing headache with aura") == "migraine"
    _, harness, _ = load(fallback, "[DIAGNOSIS]dengue[/DIAGNOSIS]")
    assert harness.predict("throbbing headache with aura") == "[DIAGNOSIS]dengue[/DIAGNOSIS]"


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
    assert "Possible answers: common cold; dengue; migraine." in lm.calls[0]["system"]


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
    assert lm.calls[0]["max_tokens"] == 48

    source = seed("symptom2disease", "retrieval")
    assert "K = 16" in get_operator("more_retrieved").apply(source).source
    assert "K = 4" in get_operator("fewer_retrieved").apply(source).source
    off = get_operator("retrieval_off").apply(source)
    assert "K = 0" in off.source and "retrieval off" in off.summary
    _, harness, lm = load(off.source, "dengue")
    assert harness.predict("fever rash") == "[DIAGNOSIS]dengue[/DIAGNOSIS]"
    assert "Symptoms: high fever" not in lm.calls[0]["prompt"]
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
