"""The paper's metrics on tricky cases: separators, whitespace, missing tags, JSON answers."""

from __future__ import annotations

import pytest

from metaharness.tasks.text.metrics import (
    extract_final_answer,
    parse_charges,
    score_lawbench,
    score_symptom2disease,
    score_uspto,
)

# Whole answers and the primary score the paper's metric gives them.
PRIMARY = [
    ("lawbench", "[罪名] 诈骗 ; 盗窃 <eoa>", "盗窃;诈骗", 1.0, "set equality ignores order and spaces"),
    ("lawbench", "[罪名]盗窃；诈骗<eoa>", "盗窃;诈骗", 1.0, "full-width semicolon matches the ASCII gold"),
    ("lawbench", "推理……[罪名]盗窃", "盗窃", 1.0, "a missing end tag reads to the end"),
    ("lawbench", "罪名:故意伤害", "故意伤害", 1.0, "the charge prefix without tags"),
    ("lawbench", "根据事实，被告人构成盗窃罪。\n[罪名]盗窃<eoa>多余", "盗窃", 1.0, "reasoning before the tags"),
    ("symptom2disease", "[DIAGNOSIS]  Common   Cold. [/DIAGNOSIS]", "common cold", 1.0, "the tag is normalised"),
    ("symptom2disease", "[diagnosis]\nDengue!\n[/diagnosis]", "dengue", 1.0, "case-insensitive tags across lines"),
    ("symptom2disease", "Reasoning...\nFinal diagnosis: Malaria.", "malaria", 1.0, "no tag: the diagnosis line"),
    ("symptom2disease", "I think it is probably malaria", "malaria", 0.0, "no tag and prose scores zero"),
    ("symptom2disease", "psoriasis\n", "psoriasis", 1.0, "a bare label is an exact match"),
    ("symptom2disease", "[DIAGNOSIS]allergy[/DIAGNOSIS]", "drug reaction", 0.0, "a wrong label scores zero"),
    ("uspto", "CCO.c1ccccc1", "c1ccccc1.cco", 1.0, "a set of SMILES ignores order and case"),
    ("uspto", " Brc1ccccc1 . CCO ", "CCO.Brc1ccccc1", 1.0, "spaces around the molecules"),
    ("uspto", '```json\n{"reasoning": "hydrolysis", "final_answer": "CCO.CC(=O)O"}\n```', "CC(=O)O.CCO", 1.0, "JSON"),
]
SCORERS = {"lawbench": score_lawbench, "symptom2disease": score_symptom2disease, "uspto": score_uspto}


@pytest.mark.parametrize(("task", "answer", "gold", "primary", "case"), PRIMARY, ids=[row[-1] for row in PRIMARY])
def test_primary_score(task, answer, gold, primary, case):
    assert SCORERS[task](answer, gold)["primary"] == primary


# ---------------------------------------------------------------- LawBench


@pytest.mark.parametrize("separator", [";", "；", ",", "，", "、"])
def test_lawbench_every_separator_splits(separator):
    assert parse_charges(f"[罪名]盗窃{separator}诈骗<eoa>") == {"盗窃", "诈骗"}


def test_lawbench_charge_names_containing_enumeration_comma_stay_whole():
    gold = "非法携带枪支、弹药、管制刀具、危险物品危及公共安全;寻衅滋事"
    assert parse_charges(gold) == {"非法携带枪支、弹药、管制刀具、危险物品危及公共安全", "寻衅滋事"}
    assert score_lawbench(f"[罪名]寻衅滋事;{gold.split(';')[0]}<eoa>", gold)["primary"] == 1.0


def test_lawbench_partial_answer_gets_f1_but_not_primary():
    scores = score_lawbench("[罪名]盗窃<eoa>", "盗窃;诈骗")
    assert scores["primary"] == 0.0
    assert scores["precision"] == 1.0 and scores["recall"] == 0.5
    assert scores["f1"] == pytest.approx(2 / 3)


def test_lawbench_no_answer_scores_zero():
    scores = score_lawbench("", "盗窃")
    assert scores == {"primary": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0}


# ---------------------------------------------------------------- USPTO


def test_uspto_jaccard_for_partial_answers():
    scores = score_uspto("CCO.CCN", "CCO.CCCl")
    assert scores["primary"] == 0.0
    assert scores["jaccard"] == pytest.approx(1 / 3)


def test_uspto_empty_prediction():
    assert score_uspto("", "CCO") == {"primary": 0.0, "jaccard": 0.0}


def test_final_answer_embedded_in_prose():
    assert extract_final_answer('Here: {"final_answer": "dengue"} done') == "dengue"
    assert extract_final_answer("no json here") == "no json here"
    assert extract_final_answer('{"answer": 1}') == '{"answer": 1}'
