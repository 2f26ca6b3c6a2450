"""Two-parent revisions: a harness made of two candidates, each in a namespace of its own, answers combined; the
contract that keeps every stage downstream on one-parent operators (``Combination.partner``)."""

from __future__ import annotations

import ast

import pytest
from fakes import ScriptedLM
from test_label_blocks import TRAIN, build
from test_operators import revise, seed

from metaharness.candidate import Candidate, Evaluation
from metaharness.errors import InputError
from metaharness.proposers.offline import complementary_partners
from metaharness.proposers.operators import COMBINATIONS, OPERATOR_NAMES, applicable, get_operator
from metaharness.proposers.operators.combine import literal

FALLBACK, VOTE = COMBINATIONS

# Two parents that define the same module names with different values: combined, neither sees the other's.
PARENT = """
LABEL = {label!r}


class Harness:
    def __init__(self, lm, train):
        self.lm = lm

    def predict(self, x):
        said = self.lm("{tag}: " + x)
        return LABEL if said == "agree" else said
"""


def parent(label: str, tag: str) -> str:
    return PARENT.format(label=label, tag=tag)


def test_literal_gives_the_text_back_exactly() -> None:
    for text in [
        "plain\nlines",
        "with \"\"\" and '''",
        "a backslash \\ and \\n",
        "ends with a quote'",
        seed("lawbench", "retrieval"),
    ]:
        assert ast.literal_eval(literal(text)) == text


def test_combined_parents_run_in_their_own_namespaces_and_make_only_their_own_calls() -> None:
    first, second = parent("common cold", "first"), parent("dengue", "second")
    source = FALLBACK.partner("c2", second).apply(first).source
    harness, lm = build(source, lambda request: "agree")
    assert harness.predict("sneezing") == "common cold"  # the first's LABEL, not the second's
    assert [r.messages[-1]["content"] for r in lm.requests] == ["first: sneezing"]
    # The first names no label: the second answers, through its own call.
    harness, lm = build(source, lambda request: "agree" if "second" in request.messages[-1]["content"] else "?")
    assert harness.predict("sneezing") == "dengue"
    assert [r.messages[-1]["content"] for r in lm.requests] == ["first: sneezing", "second: sneezing"]


def test_a_failing_first_parent_leaves_the_answer_to_the_second() -> None:
    broken = parent("migraine", "first").replace("said = self.lm(", "said = 1 / 0 or self.lm(")
    source = FALLBACK.partner("c2", parent("dengue", "second")).apply(broken).source
    harness, _ = build(source, lambda request: "agree")
    assert harness.predict("fever") == "dengue"


@pytest.mark.parametrize(
    ("first_says", "second_says", "question", "answer"),
    [
        ("migraine", "migraine", "sneezing and a runny nose", "migraine"),  # both agree: kept
        ("migraine", "common cold", "sneezing and a runny nose", "common cold"),  # the classifier decides
        ("dengue", "migraine", "headache with nausea", "migraine"),
    ],
)
def test_vote_keeps_what_both_name_and_lets_a_classifier_break_ties(first_says, second_says, question, answer) -> None:
    source = VOTE.partner("c9", parent(second_says, "second")).apply(parent(first_says, "first")).source
    harness, _ = build(source, lambda request: "agree")
    assert harness.predict(question) == answer


def test_partners_are_bound_into_one_parent_operators_and_named_by_them() -> None:
    first = revise(seed("symptom2disease", "retrieval"), "neighbour_vote")
    second = seed("symptom2disease", "zero_shot")
    bound = VOTE.partner("c015", second)
    assert bound.name == "combine_vote+c015" and bound.kind == "combine" and bound.post_processing
    revision = bound.apply(first)
    assert revision.operator == "combine_vote+c015" and "c015" in revision.summary
    assert not bound.applies(second)  # a candidate is not combined with itself
    assert not bound.applies(revision.source)  # nor is a combination combined again
    assert not VOTE.partner("c1", revision.source).applies(first)
    # Looked up by name (as a chain's operators are), a bound operator has its flags but no partner to apply.
    named = get_operator("combine_vote+c015")
    assert named.kind == "combine" and named.post_processing and not named.applies(first)
    assert {"combine_vote", "combine_fallback"} <= set(OPERATOR_NAMES)
    with pytest.raises(InputError, match="NAME\\+ID"):
        get_operator("combine_nothing+c1")
    # One-parent revisions of the combined harness: post-processing wraps, the weight grid.
    names = {op.name for op in applicable(revision.source)}
    assert {
        "snap_to_labels",
        "combine_weight_2.0",
        "classifier_centroid",
    } <= names and "combine_weight_1.0" not in names
    assert not {"label_primed_query", "draft_verify"} & names  # they would replace what combines the parents


def test_a_combined_seed_pair_is_a_working_harness_on_each_task() -> None:
    charges = [
        {"id": "l0", "input": "事实:盗窃手机。", "target": "盗窃"},
        {"id": "l1", "input": "事实:诈骗钱财。", "target": "诈骗"},
    ]
    for task, train, reply in [
        ("symptom2disease", TRAIN, "[DIAGNOSIS]dengue[/DIAGNOSIS]"),
        ("lawbench", charges, "[罪名]诈骗<eoa>"),
    ]:
        for combination in COMBINATIONS:
            source = combination.partner("c2", seed(task, "zero_shot")).apply(seed(task, "retrieval")).source
            harness, lm = build(source, reply, train=train)
            assert harness.predict(train[0]["input"]).strip()
    smiles = seed("uspto", "retrieval")
    source = FALLBACK.partner("c2", seed("uspto", "zero_shot")).apply(smiles).source
    module: dict = {}
    exec(compile(source, "harness.py", "exec"), module)
    harness = module["Harness"](
        ScriptedLM("CCO", context_window=4096), [{"id": "u", "input": "Input: CCO", "target": "CC.O"}]
    )
    assert harness.predict("Input: CCO") == "CCO"


# ---------------------------------------------------------------- which partners the offline proposer offers


def scored(cid: str, source: str, scores: list[float], ids: str = "abcd") -> Candidate:
    """An evaluated candidate scored ``scores`` on the validation examples named by the letters of ``ids``."""
    evaluation = Evaluation(
        "val",
        {"primary": sum(scores) / len(scores)},
        examples=len(scores),
        example_ids=list(ids),
        example_scores=scores,
    )
    return Candidate(id=cid, parent=None, source=source, iteration=0, evaluation=evaluation)


def test_partners_are_right_where_the_first_is_wrong_and_never_its_twins() -> None:
    first = scored("a", "A", [1.0, 0.0, 0.0, 1.0])
    twin = scored("twin", "T", [1.0, 0.0, 0.0, 1.0])  # the best by score, the same outputs where both were scored
    worse = scored("worse", "W", [0.0, 0.0, 0.0, 1.0])
    one = scored("one", "O", [0.0, 1.0, 0.0, 0.0])
    two = scored("two", "W2", [0.0, 1.0, 1.0, 0.0])
    unknown = scored("unknown", "U", [1.0, 1.0], ids="xy")  # no example scored with the first
    ranking = [first, twin, unknown, worse, one, two]
    assert [c.id for c in complementary_partners(first, ranking, 2)] == ["two", "one"]
    assert [c.id for c in complementary_partners(first, ranking, 9)] == ["two", "one", "unknown"]
    assert complementary_partners(twin, [twin, first], 2) == []  # a twin of every other candidate: no partner


def test_the_offline_proposer_binds_each_candidate_s_own_complementary_partners(shared_data_dir) -> None:
    from test_proposers_offline import NoValTask, keyword_model

    from metaharness.proposers.offline import OfflineProposer
    from metaharness.search.protocol import RunState
    from metaharness.tasks import get_task

    task = NoValTask(get_task("symptom2disease", data_dir=shared_data_dir))
    zero, few, retrieval = (seed("symptom2disease", name) for name in ("zero_shot", "few_shot", "retrieval"))
    best = scored("c2", retrieval, [1.0, 1.0, 0.0, 0.0])
    twin = scored("c1", few, [1.0, 1.0, 0.0, 0.0])  # second by score, but right only where the best is
    helper = scored("c0", zero, [0.0, 0.0, 1.0, 0.0])
    state = RunState(task="symptom2disease", iteration=1, candidates=[helper, twin, best], proposals=2)
    proposer = OfflineProposer(task, keyword_model(), plans=2, operators=["combine_vote"])
    proposals = proposer.propose(state)
    assert [name for name, _ in proposer.partners_for(retrieval)] == ["c0"]
    assert [name for name, _ in proposer.partners_for(zero)] == ["c2", "c1"]  # both right where c0 is wrong
    assert [name for name, _ in proposer.partners_for("a program not evaluated")] == ["c0"]  # the best's
    assert proposals and all(p.summary.startswith("combine with c") for p in proposals)
    pairs = {(p.parent, p.summary.split()[2].rstrip(":")) for p in proposals}
    assert ("c2", "c0") in pairs and not {("c2", "c1"), ("c1", "c2")} & pairs  # twins are never combined
