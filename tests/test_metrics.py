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

# ---------------------------------------------------------------- LawBench


def test_lawbench_set_equality_ignores_order_and_spaces():
    assert score_lawbench("[罪名] 诈骗 ; 盗窃 <eoa>", "盗窃;诈骗")["primary"] == 1.0


@pytest.mark.parametrize("separator", [";", "；", ",", "，", "、"])
def test_lawbench_every_separator_splits(separator):
    assert parse_charges(f"[罪名]盗窃{separator}诈骗<eoa>") == {"盗窃", "诈骗"}


def test_lawbench_full_width_semicolon_matches_ascii_gold():
    assert score_lawbench("[罪名]盗窃；诈骗<eoa>", "盗窃;诈骗")["primary"] == 1.0


def test_lawbench_charge_names_containing_enumeration_comma_stay_whole():
    gold = "非法携带枪支、弹药、管制刀具、危险物品危及公共安全;寻衅滋事"
    assert parse_charges(gold) == {"非法携带枪支、弹药、管制刀具、危险物品危及公共安全", "寻衅滋事"}
    assert score_lawbench(f"[罪名]寻衅滋事;{gold.split(';')[0]}<eoa>", gold)["primary"] == 1.0


def test_lawbench_partial_answer_gets_f1_but_not_primary():
    scores = score_lawbench("[罪名]盗窃<eoa>", "盗窃;诈骗")
    assert scores["primary"] == 0.0
    assert scores["precision"] == 1.0 and scores["recall"] == 0.5
    assert scores["f1"] == pytest.approx(2 / 3)


def test_lawbench_missing_end_tag_reads_to_the_end():
    assert score_lawbench("推理……[罪名]盗窃", "盗窃")["primary"] == 1.0


def test_lawbench_charge_prefix_without_tags():
    assert score_lawbench("罪名:故意伤害", "故意伤害")["primary"] == 1.0


def test_lawbench_no_answer_scores_zero():
    scores = score_lawbench("", "盗窃")
    assert scores == {"primary": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0}


def test_lawbench_reasoning_before_tags_is_ignored():
    assert score_lawbench("根据事实，被告人构成盗窃罪。\n[罪名]盗窃<eoa>多余", "盗窃")["primary"] == 1.0


# ---------------------------------------------------------------- Symptom2Disease


def test_symptom_tag_is_normalised():
    assert score_symptom2disease("[DIAGNOSIS]  Common   Cold. [/DIAGNOSIS]", "common cold")["primary"] == 1.0


def test_symptom_tag_is_case_insensitive_and_may_span_lines():
    assert score_symptom2disease("[diagnosis]\nDengue!\n[/diagnosis]", "dengue")["primary"] == 1.0


def test_symptom_missing_tag_falls_back_to_diagnosis_line():
    assert score_symptom2disease("Reasoning...\nFinal diagnosis: Malaria.", "malaria")["primary"] == 1.0


def test_symptom_missing_tag_and_prose_scores_zero():
    assert score_symptom2disease("I think it is probably malaria", "malaria")["primary"] == 0.0


def test_symptom_bare_label_is_exact_match():
    assert score_symptom2disease("psoriasis\n", "psoriasis")["primary"] == 1.0


def test_symptom_wrong_label_scores_zero():
    assert score_symptom2disease("[DIAGNOSIS]allergy[/DIAGNOSIS]", "drug reaction")["primary"] == 0.0


# ---------------------------------------------------------------- USPTO


def test_uspto_set_of_smiles_ignores_order_and_case():
    assert score_uspto("CCO.c1ccccc1", "c1ccccc1.cco")["primary"] == 1.0
    assert score_uspto(" Brc1ccccc1 . CCO ", "CCO.Brc1ccccc1")["primary"] == 1.0


def test_uspto_jaccard_for_partial_answers():
    scores = score_uspto("CCO.CCN", "CCO.CCCl")
    assert scores["primary"] == 0.0
    assert scores["jaccard"] == pytest.approx(1 / 3)


def test_uspto_empty_prediction():
    assert score_uspto("", "CCO") == {"primary": 0.0, "jaccard": 0.0}


def test_uspto_json_final_answer_is_read():
    answer = '```json\n{"reasoning": "ester hydrolysis", "final_answer": "CCO.CC(=O)O"}\n```'
    assert score_uspto(answer, "CC(=O)O.CCO")["primary"] == 1.0


def test_final_answer_embedded_in_prose():
    assert extract_final_answer('Here: {"final_answer": "dengue"} done') == "dengue"
    assert extract_final_answer("no json here") == "no json here"
    assert extract_final_answer('{"answer": 1}') == '{"answer": 1}'
