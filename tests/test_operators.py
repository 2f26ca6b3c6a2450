"""The harness transformations: they apply to the seeds of all three tasks, compose into chains of depth 3 that stay
working programs, and change behaviour as they say.

Transformed harnesses are executed here with a scripted stand-in for the task model; that tests the generated
code's logic (the evaluator's sandbox runs it for real in the proposer tests). Each task gets a small training set
in its own answer shape: single labels (Symptom2Disease), Chinese cases with charge sets (LawBench), reaction
questions with SMILES (USPTO).
"""

from __future__ import annotations

import random
import re
import types

import pytest
from fakes import ScriptedLM

from metaharness.candidates import ROOT as SEEDS
from metaharness.errors import InputError
from metaharness.proposers.operators import (
    COMBINATIONS,
    OPERATOR_NAMES,
    OPERATORS,
    AnswerProfile,
    answer_profile,
    applicable,
    get_operator,
)
from metaharness.proposers.operators.prompts import ANSWER_CAP, FORMAT_SENTENCE

TRAIN = {
    "symptom2disease": [
        {"id": "t0", "input": "runny nose sneezing sore throat", "target": "common cold"},
        {"id": "t1", "input": "high fever joint pain rash behind eyes", "target": "dengue"},
        {"id": "t2", "input": "throbbing headache light hurts nausea", "target": "migraine"},
        {"id": "t3", "input": "sneezing blocked nose mild cough", "target": "common cold"},
        {"id": "t4", "input": "fever rash severe joint pain", "target": "dengue"},
        {"id": "t5", "input": "one sided headache with aura", "target": "migraine"},
        {"id": "t6", "input": "stuffy nose sneezing tired", "target": "common cold"},
    ],
    "lawbench": [
        {"id": "l0", "input": "事实:被告人在超市盗窃手机一部，价值三千元。", "target": "盗窃"},
        {"id": "l1", "input": "事实:被告人持刀故意伤害被害人，致其轻伤。", "target": "故意伤害"},
        {"id": "l2", "input": "事实:被告人盗窃电动车后又持刀伤害失主。", "target": "盗窃;故意伤害"},
        {"id": "l3", "input": "事实:被告人在商场盗窃钱包，价值两千元。", "target": "盗窃"},
        {"id": "l4", "input": "事实:被告人冒充公司员工诈骗他人钱财。", "target": "诈骗"},
        {"id": "l5", "input": "事实:被告人盗窃并诈骗被害人财物。", "target": "盗窃;诈骗"},
        {"id": "l6", "input": "事实:被告人组织、容留他人卖淫。", "target": "组织、强迫、引诱、容留、介绍卖淫"},
        {"id": "l7", "input": "事实:被告人殴打他人，故意伤害致其轻伤。", "target": "故意伤害"},
    ],
    "uspto": [
        {
            "id": "u0",
            "input": "Context: The reaction type is Protections.\nInput: CC(C)(C)OC(=O)NCCc1ccc(N)cc1\nAnswer: ",
            "target": "CC(C)(C)OC(=O)OC(=O)OC(C)(C)C.NCCc1ccc(N)cc1",
        },
        {
            "id": "u1",
            "input": "Context: The reaction type is Oxidations.\nInput: Cc1cc(C=O)cc(C(F)(F)F)c1\nAnswer: ",
            "target": "Cc1cc(CO)cc(C(F)(F)F)c1",
        },
        {
            "id": "u2",
            "input": "Context: The reaction type is Reductions.\nInput: COc1cc(N)ccc1Oc1ccc(Cl)c(Cl)c1\nAnswer: ",
            "target": "COc1cc([N+](=O)[O-])ccc1Oc1ccc(Cl)c(Cl)c1",
        },
        {
            "id": "u3",
            "input": "Context: The reaction type is C-C bond formation.\nInput: Clc1ncncc1C#Cc1ccccc1\nAnswer: ",
            "target": "C#Cc1ccccc1.Clc1ncncc1I",
        },
    ],
}
PROFILE = {task: answer_profile(rows) for task, rows in TRAIN.items()}
REPLY = {"symptom2disease": "[DIAGNOSIS]dengue[/DIAGNOSIS]", "lawbench": "[罪名]盗窃<eoa>", "uspto": "CCO.CC"}
SEED_CASES = [(task, path) for task in TRAIN for path in sorted((SEEDS / task).glob("*.py"))]
DENGUE = "[DIAGNOSIS]dengue[/DIAGNOSIS]"
COLD = "[DIAGNOSIS]common cold[/DIAGNOSIS]"


def load(source: str, reply: str, train: list[dict] | None = None):
    """Run a harness file as a module; its Harness gets a scripted lm that answers every call with ``reply``."""
    module = types.ModuleType("harness_under_test")
    exec(compile(source, "harness.py", "exec"), module.__dict__)
    lm = ScriptedLM(reply, context_window=4096)
    return module, module.Harness(lm, train or TRAIN["symptom2disease"]), lm


def seed(task: str, name: str) -> str:
    return (SEEDS / task / f"{name}.py").read_text()


def revise(source: str, *names: str) -> str:
    for name in names:
        source = get_operator(name).apply(source).source
    return source


def test_answer_profiles_read_the_training_answers() -> None:
    assert PROFILE["symptom2disease"] == AnswerProfile(labels=3)
    assert PROFILE["lawbench"].labelled and PROFILE["lawbench"].multi_label and PROFILE["lawbench"].cjk
    assert PROFILE["lawbench"].labels == 4  # 盗窃, 故意伤害, 诈骗 and the charge whose name holds 、
    assert PROFILE["uspto"].smiles and not PROFILE["uspto"].labelled
    free_text = [{"input": f"q{i}", "target": f"a long free answer number {i}"} for i in range(20)]
    assert not answer_profile(free_text).labelled
    # Any number of labels: 150 labels, each seen twice.
    many = [{"input": f"case {i}", "target": f"label {i % 150}"} for i in range(300)]
    assert answer_profile(many).labels == 150


@pytest.mark.parametrize(("task", "path"), SEED_CASES, ids=lambda c: getattr(c, "stem", c))
def test_every_applicable_operator_keeps_a_valid_harness(task, path) -> None:
    source = path.read_text()
    ops = applicable(source, PROFILE[task])
    assert "answer_format" in {op.name for op in ops}
    if task != "uspto":
        assert {"snap_to_labels", "neighbour_vote", "neighbour_fallback"} <= {op.name for op in ops}
    else:
        assert {"canonical_smiles", "retro_rules", "retro_rules_fallback"} <= {op.name for op in ops}
    for op in ops:
        revision = op.apply(source)  # compiles, or apply raises
        assert revision.source != source and revision.summary and revision.operator == op.name
        _, harness, _ = load(revision.source, REPLY[task], TRAIN[task])
        assert isinstance(harness.predict(TRAIN[task][0]["input"]), str), op.name


@pytest.mark.parametrize("task", list(TRAIN))
def test_random_chains_of_depth_three_are_working_programs(task: str) -> None:
    """Chains of three operators, drawn at random from what applies at each step (every seed, 20 chains each),
    import, instantiate and answer a training example: operators compose."""
    profile, train = PROFILE[task], TRAIN[task]
    rng = random.Random(7)
    deepest = 0
    for name in ("zero_shot", "few_shot", "retrieval"):
        for _ in range(20):
            source, chain = seed(task, name), list[str]()
            for _step in range(3):
                ops = applicable(source, profile)
                if not ops:
                    break
                op = rng.choice(ops)
                source, chain = op.apply(source).source, [*chain, op.name]
            module, harness, _ = load(source, REPLY[task], train)
            answer = harness.predict(train[-1]["input"])
            assert isinstance(module.Harness, type) and isinstance(answer, str), chain
            deepest = max(deepest, len(chain))
    assert deepest == 3


@pytest.mark.parametrize("task", list(TRAIN))
def test_every_task_has_enough_distinct_revisions_for_twelve_proposals_an_iteration(task: str) -> None:
    """From each seed at least 12 distinct one-step revisions, and from the three seeds together at least 12 x 12
    distinct programs within two revisions: enough for 12 iterations of 12 proposals without running dry, USPTO
    included (no label vocabulary there: prompts, answer lengths, shots, SMILES clean-up and retro rules)."""
    profile = PROFILE[task]
    seeds = [seed(task, name) for name in ("zero_shot", "few_shot", "retrieval")]
    known = set(seeds)
    firsts = []
    for source in seeds:
        first = sorted({op.apply(source).source for op in applicable(source, profile)} - known)
        assert len(first) >= 12, (task, len(first))
        known |= set(first)
        firsts += first
    for revised in firsts:  # second revisions, until there are enough
        if len(known) - len(seeds) >= 144:
            break
        known |= {op.apply(revised).source for op in applicable(revised, profile)}
    assert len(known) - len(seeds) >= 144, len(known)


@pytest.mark.parametrize(("task", "path"), SEED_CASES, ids=lambda c: getattr(c, "stem", c))
def test_edits_keep_the_original_text(task, path) -> None:
    """Splicing, not regenerating: every original line (comments included) except the renamed ``def predict``
    survives verbatim, and added settings come with a comment."""
    source = path.read_text()
    name = "neighbour_vote" if task != "uspto" else "retro_rules"
    revised = get_operator(name).apply(source).source
    kept = [line for line in source.splitlines() if "def predict(" not in line]
    new_lines = revised.splitlines()
    assert all(line in new_lines for line in kept)
    if name == "neighbour_vote":
        assert re.search(r"^# Neighbour vote: .*\n(# .*\n)*VOTE_K = 5\n", revised, re.MULTILINE)


@pytest.mark.parametrize(
    ("operators", "seed_name", "reply", "question", "answer"),
    [
        (["snap_to_labels"], "few_shot", "Commn cold", "sneezing", COLD),  # a misspelt label is repaired
        (["snap_to_labels"], "few_shot", "the patient has DENGUE!", "fever", DENGUE),
        (["neighbour_vote"], "few_shot", "migraine", "sneezing runny nose stuffy nose", COLD),  # outvoted
        (["neighbour_vote", "trust_model"], "few_shot", "dengue", "fever rash joint pain headache", DENGUE),
        (["neighbour_vote", "model_free_vote"], "few_shot", "dengue", "stuffy nose sneezing", COLD),
        (["neighbour_fallback"], "zero_shot", "I am not sure.", "throbbing headache with aura", "migraine"),
        (["neighbour_fallback"], "zero_shot", DENGUE, "throbbing headache with aura", DENGUE),  # a label: kept
    ],
)
def test_label_post_processors_change_answers_as_they_say(operators, seed_name, reply, question, answer) -> None:
    _, harness, _ = load(revise(seed("symptom2disease", seed_name), *operators), reply)
    assert harness.predict(question) == answer


def test_multi_label_answers_snap_and_vote_per_label_in_the_metric_format() -> None:
    train = TRAIN["lawbench"]
    snapped = revise(seed("lawbench", "zero_shot"), "snap_to_labels")
    _, harness, _ = load(snapped, "分析……[罪名]盗窃罪;故意伤害罪<eoa>", train)
    assert harness.predict("事实:……") == "分析……[罪名]盗窃;故意伤害<eoa>"  # each charge snapped, tags kept

    # A model-free vote that keeps every charge with half the top vote answers with a charge set.
    voted = revise(seed("lawbench", "retrieval"), "neighbour_vote", "model_free_vote", "label_sets", "char_2grams")
    assert "INDEX_NGRAM = 2" in voted and "VOTE_SHARE = 0.5" in voted and "VOTE_MODEL_WEIGHT = 0.0" in voted
    _, harness, _ = load(voted, "[罪名]诈骗<eoa>", train)
    answer = harness.predict("事实:被告人盗窃财物后持刀伤害失主。")
    found = re.search(r"\[罪名\](.*)<eoa>", answer)
    assert found is not None and set(found.group(1).split(";")) == {"盗窃", "故意伤害"}

    # A charge whose name contains 、 stays one label.
    _, harness, _ = load(revise(seed("lawbench", "zero_shot"), "neighbour_fallback"), "不知道", train)
    assert harness.predict("事实:被告人组织、容留他人卖淫。") == "组织、强迫、引诱、容留、介绍卖淫"


def test_character_ngrams_change_what_the_neighbour_index_sees() -> None:
    voted = revise(seed("lawbench", "zero_shot"), "neighbour_vote")
    module, harness, _ = load(voted, "x", TRAIN["lawbench"])
    assert harness._neighbours.tokens("盗窃手机")[:2] == ["盗", "窃"]
    module, harness, _ = load(revise(voted, "char_3grams"), "x", TRAIN["lawbench"])
    assert harness._neighbours.tokens("盗窃手机") == ["盗窃手", "窃手机"]
    assert "more_voters" in {op.name for op in applicable(voted, PROFILE["lawbench"])}
    assert "VOTE_K = 10" in revise(voted, "more_voters") and "VOTE_K = 2" in revise(voted, "fewer_voters")


def test_smiles_clean_up_and_retro_rules() -> None:
    train = TRAIN["uspto"]
    protection = train[0]["input"]
    _, harness, _ = load(revise(seed("uspto", "zero_shot"), "canonical_smiles"), "C(C)O.OCC.notsmiles", train)
    assert harness.predict(protection) == "CCO"  # canonical, duplicates and invalid parts dropped

    _, harness, _ = load(revise(seed("uspto", "zero_shot"), "retro_rules"), "CCO", train)
    assert set(harness.predict(protection).split(".")) == set(train[0]["target"].split("."))  # Boc protection
    assert harness.predict(train[1]["input"]) == train[1]["target"]  # aldehyde <- primary alcohol
    assert harness.predict(train[3]["input"]) == "CCO"  # no rule for this type: the model's answer stays

    fallback = revise(seed("uspto", "zero_shot"), "retro_rules_fallback")
    _, harness, _ = load(fallback, "CCO", train)
    assert harness.predict(protection) == "CCO"  # a valid answer is kept
    _, harness, _ = load(fallback, "((((", train)
    assert harness.predict(train[2]["input"]) == train[2]["target"]  # aromatic amine <- nitro
    assert not get_operator("retro_rules").applies(fallback)  # one rule wrapper per program


def test_answer_format_appends_to_the_instruction_constant() -> None:
    source = seed("symptom2disease", "zero_shot")
    module, _, _ = load(get_operator("answer_format").apply(source).source, "x")
    original, _, _ = load(source, "x")
    assert module.INSTRUCTION.startswith(original.INSTRUCTION)
    assert module.INSTRUCTION.endswith(FORMAT_SENTENCE.strip())
    assert not get_operator("answer_format").applies(get_operator("answer_format").apply(source).source)


def test_label_list_reaches_the_system_prompt_for_small_vocabularies_only() -> None:
    source = seed("lawbench", "zero_shot")  # no LABELS constant in this seed
    revised = get_operator("label_list").apply(source).source
    _, harness, lm = load(revised, "[罪名]盗窃<eoa>")
    harness.predict("事实: ...")
    system = lm.requests[0].messages[0]
    assert system["role"] == "system" and "Possible answers: common cold; dengue; migraine." in system["content"]
    assert get_operator("label_list").applies(source, AnswerProfile(labels=20))
    assert not get_operator("label_list").applies(source, AnswerProfile(labels=134, multi_label=True))


def test_balanced_shots_reorders_training_examples_round_robin() -> None:
    revised = get_operator("balanced_shots").apply(seed("symptom2disease", "few_shot")).source
    module, harness, _ = load(revised, "dengue")
    order = [item["target"] for item in module._label_round_robin(TRAIN["symptom2disease"])]
    assert order[:3] == ["common cold", "dengue", "migraine"]
    assert sorted(order) == sorted(item["target"] for item in TRAIN["symptom2disease"])


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


def test_more_retrieved_lawbench_shots_still_fit_the_context_window() -> None:
    """Doubling the shots of the LawBench retrieval seed never sends a prompt past the model's window."""
    long_train = [{"id": f"x{i}", "input": "事实:" + "被告人盗窃财物。" * 300, "target": "盗窃"} for i in range(12)]
    source = revise(seed("lawbench", "retrieval"), "more_retrieved", "more_retrieved")
    _, harness, lm = load(source, "[罪名]盗窃<eoa>", long_train)
    harness.predict("事实:" + "被告人盗窃财物。" * 400)
    prompt = "".join(m["content"] for m in lm.requests[0].messages)
    estimate = sum(0.3 if ord(ch) < 128 else 2.2 for ch in prompt)
    assert estimate <= 4096 * 0.9


def test_operators_refuse_what_they_cannot_edit() -> None:
    with pytest.raises(InputError, match="does not apply"):
        get_operator("more_retrieved").apply(seed("symptom2disease", "zero_shot"))
    assert applicable("def not_a_harness(): pass") == []
    assert applicable("class Harness:\n    def predict(self, x): return x\n") == []  # no __init__ hook
    assert applicable("this is not python(") == []
    with pytest.raises(InputError, match="Unknown operator"):
        get_operator("rewrite_everything")
    names = {op.name for op in applicable(seed("uspto", "retrieval"), PROFILE["uspto"])}
    assert "snap_to_labels" not in names and "more_retrieved" in names
    names = {op.name for op in applicable(seed("lawbench", "retrieval"), PROFILE["lawbench"])}
    assert "retro_rules" not in names and "balanced_shots" not in names
    assert len(set(OPERATOR_NAMES)) == len(OPERATORS) + len(COMBINATIONS)


def test_parameter_grids_are_families_of_distinct_operators_that_set_absolute_values() -> None:
    retrieval = seed("symptom2disease", "retrieval")
    assert "K = 3\n" in revise(retrieval, "retrieve_k3")
    assert not get_operator("retrieve_k3").applies(revise(retrieval, "retrieve_k3"))
    assert {get_operator(n).kind for n in ("retrieve_k3", "retrieve_k24", "more_retrieved")} == {"retrieve_k"}

    few = revise(seed("symptom2disease", "few_shot"), "few_shot_2")
    module, harness, _ = load(few, "dengue")
    assert module.MAX_SHOTS == 2 and len(harness.shots) == 2
    assert "MAX_SHOTS = 8" in revise(few, "few_shot_8") and not get_operator("few_shot_2").applies(few)
    assert not get_operator("few_shot_2").applies(retrieval)  # a retrieving harness has no shot prefix

    _, harness, lm = load(revise(seed("uspto", "zero_shot"), "answer_tokens_64"), "CCO", TRAIN["uspto"])
    harness.predict(TRAIN["uspto"][0]["input"])
    assert lm.requests[0].max_tokens == 64
    assert "SHOT_CHARS = 200" in revise(seed("lawbench", "few_shot"), "shot_chars_200")

    voted = revise(seed("symptom2disease", "retrieval"), "neighbour_vote_k9_w0.0")
    assert "VOTE_K = 9" in voted and "VOTE_MODEL_WEIGHT = 0.0" in voted
    assert "VOTE_K = 15" in revise(voted, "vote_k15") and "VOTE_MODEL_WEIGHT = 1.0" in revise(voted, "vote_weight_1.0")
    assert not get_operator("vote_k9").applies(voted) and not get_operator("neighbour_vote").applies(voted)
    assert "INDEX_NGRAM = 0" in revise(revise(voted, "char_4grams"), "word_terms")

    # One answer-format sentence per program.
    formatted = revise(seed("symptom2disease", "zero_shot"), "answer_format_short")
    assert not any(get_operator(n).applies(formatted) for n in ("answer_format", "answer_format_examples"))


def test_retro_rules_leave_skipped_reaction_types_to_the_model() -> None:
    train = TRAIN["uspto"]
    ruled = revise(seed("uspto", "zero_shot"), "retro_rules")
    skipped = revise(ruled, "retro_skip_protections")
    _, harness, _ = load(skipped, "CCO", train)
    assert harness.predict(train[0]["input"]) == "CCO"  # a protection: the model answers
    assert harness.predict(train[1]["input"]) == train[1]["target"]  # an oxidation: still the rule
    assert not get_operator("retro_skip_protections").applies(skipped)
    assert not get_operator("retro_skip_oxidations").applies(seed("uspto", "zero_shot"))  # no rules yet
