"""The label building blocks: model-free classifiers, tuned neighbour votes, and model calls constrained to the label
set, as the operators write them into harnesses.

Generated harnesses run here with the harness's real ``lm`` over a scripted model (``ScriptedLM``), which
records every request; one test runs the constrained block on the embedded model to see the enum honoured.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from collections import Counter

import pytest
from fakes import ScriptedLM
from test_operators import TRAIN as OPERATOR_TRAIN
from test_operators import revise, seed

from metaharness.candidates.protocol import LM
from metaharness.evaluation.proxy import CallRecorder, ModelRef
from metaharness.proposers.operators import answer_profile, applicable, get_operator
from metaharness.proposers.operators.harness_code import definitions, names

TRAIN = [
    *OPERATOR_TRAIN["symptom2disease"],
    {"id": "t7", "input": "headache nausea light sensitivity", "target": "migraine"},
    {"id": "t8", "input": "rash fever pain in joints", "target": "dengue"},
]
CHARGES = OPERATOR_TRAIN["lawbench"]
CHARGE_LABELS = {"盗窃", "故意伤害", "诈骗", "组织、强迫、引诱、容留、介绍卖淫"}
DIAGNOSES = sorted({item["target"] for item in TRAIN})
STDLIB = set(sys.stdlib_module_names)


def build(source: str, script, train=TRAIN, context_window: int = 4096):
    """The harness ``source`` defines, constructed on ``train`` with a scripted ``lm``; (harness, lm)."""
    module = types.ModuleType("harness_under_test")
    exec(compile(source, "harness.py", "exec"), module.__dict__)
    lm = ScriptedLM(script, context_window=context_window)
    return module.Harness(lm, train), lm


def code(*names: str) -> dict:
    """A namespace holding the harness code ``names`` and what they use, as a harness would."""
    namespace: dict = {}
    exec("\n\n".join(definitions(*names).values()), namespace)
    return namespace


def enum_of(request) -> list[str]:
    """The labels a constrained request allows."""
    answer = request.json_schema["properties"]["answer"]
    return answer["enum"] if "enum" in answer else answer["items"]["enum"]


def first_allowed(request):
    """A model that answers every constrained call with the first label it allows, and plain calls with 'x'."""
    if request.json_schema is None:
        return "x"
    answer = request.json_schema["properties"]["answer"]
    return {"answer": [enum_of(request)[0]] if answer.get("type") == "array" else enum_of(request)[0]}


# ---------------------------------------------------------------- the harness code itself


def test_harness_code_is_self_contained_stdlib_only_and_resolves_what_it_uses() -> None:
    every = names()
    namespace = code(*every)  # all of it together compiles and defines what it names
    assert {"_LabelClassifier", "_NeighbourIndex", "_ConstrainedLM", "_LabelPrimedQuery", "_DraftVerify"} <= set(
        namespace
    )
    for name, text in definitions(*every).items():
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
        }
        assert imported <= STDLIB, (name, imported - STDLIB)
    # Asking for one definition brings what it calls, the ones used first.
    assert list(definitions("_snap_labels")) == ["_label_atoms", "_snap_label", "_snap_labels"]


@pytest.mark.parametrize("kind", ["centroid", "bayes", "logistic"])
def test_each_classifier_learns_the_training_labels(kind: str) -> None:
    classifier = code("_LabelClassifier")["_LabelClassifier"](TRAIN, kind, 0)
    for text, label in [
        ("sneezing and a runny nose", "common cold"),
        ("fever with a rash and joint pain", "dengue"),
        ("headache with nausea", "migraine"),
    ]:
        scores = classifier.scores(text)
        assert set(scores) == set(DIAGNOSES) and all(s >= 0 for s in scores.values())
        assert max(scores, key=scores.get) == label, (kind, text, scores)


def test_terms_chosen_by_leave_one_out_prefer_character_ngrams_where_words_do_not_repeat() -> None:
    """Labels told apart by a shared word stem (no whole word repeats between examples): character n-grams win."""
    stems = {"alpha": "zorbat", "beta": "quindel", "gamma": "plovix"}
    train = [
        {"id": f"{label}{i}", "input": f"{stem}{suffix} w{label}{i}", "target": label}
        for label, stem in stems.items()
        for i, suffix in enumerate(["ing", "ed", "er", "s"])
    ]
    ns = code("_best_terms", "_LabelClassifier")
    assert ns["_best_terms"](train, (0, 3)) == 3
    assert ns["_LabelClassifier"](train, "centroid", "auto").ngram in (2, 3)
    assert ns["_best_terms"](TRAIN, (0, 3)) in (0, 3)


def test_decide_mixes_the_model_answer_and_keeps_a_label_set_by_share() -> None:
    decide = code("_decide")["_decide"]
    scores = {"a": 1.0, "b": 0.6, "c": 0.2}
    assert decide(scores, [], 0.0, 1.0) == ["a"]
    assert decide(scores, ["c"], 0.0, 1.0) == ["a"]  # weight 0: the model's label changes nothing
    assert decide(scores, ["c"], 1.0, 1.0) == ["c"]  # 0.2 + 1.0 x the best
    assert decide(scores, [], 0.0, 0.5) == ["a", "b"]
    assert decide({}, ["c"], 0.5, 1.0) == ["c"] and decide({}, [], 0.5, 1.0) == []


def test_prior_correction_and_similarity_power() -> None:
    ns = code("_prior_corrected", "_neighbour_votes")
    counts = {"common": 8, "rare": 2}
    assert ns["_prior_corrected"]({"common": 0.5, "rare": 0.3}, counts, 0.0) == {"common": 0.5, "rare": 0.3}
    corrected = ns["_prior_corrected"]({"common": 0.5, "rare": 0.3}, counts, 1.0)
    assert corrected["rare"] > corrected["common"]
    near = [(0.9, "a"), (0.5, "b"), (0.5, "b")]
    assert ns["_neighbour_votes"](near, 0.0) == {"a": 1.0, "b": 2.0}  # one vote each
    sharp = ns["_neighbour_votes"](near, 4.0)
    assert sharp["a"] > sharp["b"]  # the closest counts more


def test_bm25_index_ranks_the_matching_example_first() -> None:
    index = code("_NeighbourIndex")["_NeighbourIndex"]
    for scoring in ("tfidf", "bm25"):
        near = index(TRAIN, 0, scoring).nearest("one sided headache with aura", 2)
        assert near[0] == (pytest.approx(1.0, abs=1e-9) if scoring == "bm25" else near[0][0], "migraine")
        assert near[0][0] >= near[1][0]


# ---------------------------------------------------------------- blocks that choose their settings on train


def twins(groups: int = 6) -> list[dict]:
    """Two labels, each example with a twin of the other label sharing a rare word with it: its single nearest
    other example is always wrong, a vote of a few is right (the label word is shared by its half)."""
    return [
        {"id": f"{label}{i}", "input": f"{word} {word}s{i} twin{i}", "target": label}
        for i in range(groups)
        for label, word in (("apple", "apple"), ("berry", "berry"))
    ]


@pytest.mark.parametrize("scoring", ["tfidf", "bm25"])
def test_the_index_ranks_every_example_s_nearest_others_as_a_query_would(scoring: str) -> None:
    index = code("_NeighbourIndex")["_NeighbourIndex"]
    for train, ngram in ((TRAIN, 0), (TRAIN, 3), (CHARGES, 2)):
        built = index(train, ngram, scoring)
        for i, item in enumerate(train):
            sims = built.similarities(item["input"])
            queried = sorted(((s, j) for j, s in enumerate(sims) if j != i), reverse=True)[:4]
            found = built.others(4)[i]
            assert [j for _, j in found] == [j for _, j in queried]
            # A BM25 query divides by its best similarity (itself here); ``others`` does not: the same up to scale.
            scale = found[0][0] / queried[0][0] if scoring == "bm25" else 1.0
            assert [s for s, _ in found] == pytest.approx([s * scale for s, _ in queried])


def test_the_tuned_vote_chooses_its_settings_by_leave_one_out_on_train() -> None:
    tuned = code("_TunedVote")["_TunedVote"]
    train = twins()
    assert tuned(train, 0, 1, 1.0, 1.0).loo == 0.0  # K 1: every example's twin answers
    vote = tuned(train)
    assert vote.k > 1 and vote.loo == 1.0 and vote.share == 1.0  # single-label answers: the winner only
    assert max(vote.scores("apple apples9 twin9"), key=vote.scores("apple apples9 twin9").get) == "apple"
    assert tuned(train, ngram=0).k > 1  # on words, only a vote of several is right
    fixed = tuned(train, k=1)  # a setting given is kept, the others are still chosen: n-grams rescue K 1
    assert fixed.k == 1 and fixed.ngram > 0 and fixed.loo == 1.0


def test_the_tuned_vote_scores_each_setting_as_a_vote_without_the_example_would() -> None:
    """``_loo_vote_hits`` against the plain vote code on every setting: each example voted on by its nearest
    others (label counts without it), answered exactly or not."""
    ns = code("_loo_vote_hits", "_NeighbourIndex", "_neighbour_votes", "_prior_corrected", "_decide", "_label_atoms")
    options = {"k": (1, 2, 9), "power": (0.0, 2.0), "prior": (0.0, 1.0), "share": (1.0, 0.5)}
    for train in (CHARGES, TRAIN):
        index = ns["_NeighbourIndex"](train, 2)
        counts = Counter(label for item in train for label in ns["_label_atoms"](item["target"]))
        hits = ns["_loo_vote_hits"](index.others(9), train, counts, options)
        for (k, power, prior, share), found in hits.items():
            expected = 0
            for i, item in enumerate(train):
                own = ns["_label_atoms"](item["target"])
                sims = index.similarities(item["input"])
                near = sorted(((s, j) for j, s in enumerate(sims) if j != i), reverse=True)[:k]
                votes = ns["_neighbour_votes"]([(s, train[j]["target"]) for s, j in near], power)
                rest = counts - Counter(own)
                chosen = ns["_decide"](ns["_prior_corrected"](votes, rest, prior), [], 0.0, share)
                expected += set(chosen) == set(own)
            assert found == expected, (k, power, prior, share)


def test_the_tuned_vote_takes_the_first_best_setting_and_label_sets_only_for_multi_label_answers() -> None:
    ns = code("_TunedVote", "_loo_vote_hits", "_NeighbourIndex", "_label_counts")
    tuned = ns["_TunedVote"]
    for train, multi in ((CHARGES, True), (TRAIN, False)):
        options = dict(tuned.OPTIONS, share=tuned.OPTIONS["share"] if multi else (1.0,))
        best = None
        for ngram in options["ngram"]:
            index = ns["_NeighbourIndex"](train, ngram)
            hits = ns["_loo_vote_hits"](index.others(25), train, ns["_label_counts"](train), options)
            for setting, found in hits.items():
                if best is None or found > best[0]:
                    best = (found, ngram, *setting)
        assert best is not None
        vote = tuned(train)
        assert (vote.loo * len(train), vote.ngram, vote.k, vote.power, vote.prior, vote.share) == pytest.approx(best)
    assert tuned(TRAIN).share == 1.0


def test_the_auto_classifier_is_the_kind_and_terms_that_cross_validate_best() -> None:
    ns = code("_LabelClassifier", "_chosen_classifier")
    stems = {"alpha": "zorbat", "beta": "quindel", "gamma": "plovix"}
    train = [
        {"id": f"{label}{i}", "input": f"{stem}{suffix} w{label}{i}", "target": label}
        for label, stem in stems.items()
        for i, suffix in enumerate(["ing", "ed", "er", "s", "ly", "ful"])
    ]
    kind, terms, _, _ = ns["_chosen_classifier"](train)
    assert terms in (2, 3)  # word stems repeat as character n-grams only
    auto = ns["_LabelClassifier"](train, "auto", "auto")
    assert (auto.kind, auto.ngram) == (kind, terms)
    same = ns["_LabelClassifier"](train, kind, terms)
    assert auto.scores("zorbatish") == pytest.approx(same.scores("zorbatish"))
    assert max(auto.scores("quindelled"), key=auto.scores("quindelled").get) == "beta"
    # Logistic regression is tried only when its work fits: never at no room, and scored like the others.
    assert ns["_chosen_classifier"](train, 0, work=0)[0] in ("centroid", "bayes")
    assert ns["_chosen_classifier"](TRAIN, 0, work=1e12)[0] in ("centroid", "bayes", "logistic")


def test_self_tuning_operators_write_auto_settings_that_grids_may_fix() -> None:
    profile = answer_profile(TRAIN)
    names = {op.name for op in applicable(seed("symptom2disease", "retrieval"), profile)}
    assert {"tuned_vote", "tuned_vote_w0.5", "classifier_auto", "classifier_auto_w0.5"} <= names
    assert get_operator("tuned_vote").kind == "tuned_vote" and get_operator("classifier_auto").post_processing
    voted = revise(seed("symptom2disease", "retrieval"), "tuned_vote")
    for name in ("VOTE_K", "VOTE_POWER", "VOTE_PRIOR", "VOTE_SHARE", "INDEX_NGRAM"):
        assert f"{name} = 'auto'" in voted
    answers = set()
    for reply in ("[DIAGNOSIS]dengue[/DIAGNOSIS]", "no idea"):
        harness, _ = build(voted, reply)
        answers.add(harness.predict("sneezing and a stuffy nose"))
    assert answers == {"[DIAGNOSIS]common cold[/DIAGNOSIS]"}  # at weight 0 the model's answer changes nothing
    ops = {op.name for op in applicable(voted, profile)}
    assert {"vote_k3", "char_3grams", "vote_weight_0.5"} <= ops and not {"tuned_vote", "neighbour_vote"} & ops
    assert "more_voters" not in ops  # a relative step needs a number
    fixed = revise(voted, "vote_k3", "char_3grams", "neighbour_fallback")
    harness, _ = build(fixed, "no idea")
    assert (harness._vote.k, harness._vote.ngram) == (3, 3) and harness._neighbours is harness._vote.index
    assert harness.predict("sneezing and a stuffy nose") == "[DIAGNOSIS]common cold[/DIAGNOSIS]"
    classified = revise(seed("lawbench", "zero_shot"), "classifier_auto")
    assert "CLASSIFIER = 'auto'" in classified
    harness, _ = build(classified, "[罪名]无<eoa>", train=CHARGES)
    assert harness._classifier.kind in ("centroid", "bayes", "logistic")
    assert harness.predict("事实:被告人在超市盗窃手机。") == "[罪名]盗窃<eoa>"
    fixed_kind = revise(seed("symptom2disease", "zero_shot"), "classifier_centroid")
    assert "CLASSIFIER = 'auto'" in revise(fixed_kind, "classifier_kind_auto")


# ---------------------------------------------------------------- the operators


def test_classifier_operators_apply_to_labelled_seeds_and_only_there() -> None:
    profile = answer_profile(TRAIN)
    names = {op.name for op in applicable(seed("symptom2disease", "retrieval"), profile)}
    assert {"classifier_centroid", "classifier_logistic_w0.5", "constrained_labels", "label_shortlist"} <= names
    assert {"label_primed_query", "draft_verify"} <= names
    smiles = [{"input": f"Input: C{'C' * i}O\nAnswer: ", "target": f"C{'C' * i}.O"} for i in range(12)]
    uspto = {op.name for op in applicable(seed("uspto", "retrieval"), answer_profile(smiles))}
    assert not {n for n in uspto if n.startswith(("classifier", "label_", "draft", "constrained"))}


def test_a_model_free_classifier_answers_in_the_metric_format_whatever_the_model_says() -> None:
    source = revise(seed("symptom2disease", "retrieval"), "classifier_centroid", "classifier_terms_0")
    answers = set()
    for reply in ("[DIAGNOSIS]dengue[/DIAGNOSIS]", "[DIAGNOSIS]migraine[/DIAGNOSIS]", "no idea"):
        harness, _ = build(source, reply)
        answers.add(harness.predict("I keep sneezing with a runny nose"))
    assert answers == {"[DIAGNOSIS]common cold[/DIAGNOSIS]"}
    # With the model's answer weighted, a confident model wins against the classifier's runner-up.
    trusting = revise(source, "classifier_weight_2.0")
    harness, _ = build(trusting, "[DIAGNOSIS]dengue[/DIAGNOSIS]")
    assert harness.predict("I keep sneezing with a runny nose") == "[DIAGNOSIS]dengue[/DIAGNOSIS]"


def test_classifier_settings_are_families_of_grid_operators() -> None:
    source = revise(seed("symptom2disease", "zero_shot"), "classifier_bayes")
    ops = {op.name: op for op in applicable(source, answer_profile(TRAIN))}
    assert "classifier_kind_bayes" not in ops and "classifier_kind_logistic" in ops
    assert "classifier_epochs_5" not in ops  # SGD passes matter to the logistic classifier only
    assert "classifier_epochs_5" in {op.name for op in applicable(revise(source, "classifier_kind_logistic"))}
    assert "classifier_share_0.5" not in ops  # single-label answers
    revision = ops["classifier_terms_2_4"].apply(source)
    assert "CLASSIFIER_TERMS = (2, 4)" in revision.source and revision.operator == "classifier_terms_2_4"
    assert ops["classifier_terms_2_4"].post_processing and ops["classifier_terms_2_4"].kind == "classifier_terms"
    assert not get_operator("classifier_centroid").applies(source)  # one classifier per harness


def test_vote_similarity_settings_tune_the_new_vote() -> None:
    voted = revise(seed("symptom2disease", "few_shot"), "neighbour_vote")
    names = {op.name for op in applicable(voted, answer_profile(TRAIN))}
    assert {"vote_power_0.0", "vote_power_4.0", "vote_prior_1.0", "index_bm25"} <= names
    assert "vote_power_1.0" not in names and "index_tfidf" not in names  # the defaults
    tuned = revise(voted, "index_bm25", "vote_power_2.0", "vote_prior_0.5", "model_free_vote")
    assert "INDEX_SCORING = 'bm25'" in tuned and "VOTE_POWER = 2.0" in tuned
    harness, _ = build(tuned, "[DIAGNOSIS]migraine[/DIAGNOSIS]")
    assert harness.predict("fever and a rash with joint pain") == "[DIAGNOSIS]dengue[/DIAGNOSIS]"


def test_constrained_answers_send_the_labels_as_an_enum_and_fall_back_to_a_plain_call() -> None:
    source = revise(seed("symptom2disease", "retrieval"), "constrained_labels")
    harness, lm = build(source, first_allowed)
    assert harness.predict("sneezing") == "[DIAGNOSIS]common cold[/DIAGNOSIS]"
    assert [enum_of(r) for r in lm.requests] == [DIAGNOSES]
    assert lm.requests[0].max_tokens >= 12  # room for the JSON answer
    # A failed constrained call (here: the model answers outside the enum twice) is answered by the plain call.
    harness, lm = build(source, lambda r: {"answer": "flu"} if r.json_schema else "[DIAGNOSIS]migraine")
    assert harness.predict("sneezing") == "[DIAGNOSIS]migraine[/DIAGNOSIS]"
    assert lm.requests[-1].json_schema is None


def test_multi_label_tasks_get_an_array_of_labels_joined_as_the_training_answers_join_them() -> None:
    source = revise(seed("lawbench", "zero_shot"), "constrained_labels")
    harness, lm = build(source, lambda r: {"answer": ["盗窃", "诈骗"]}, train=CHARGES)
    assert harness.predict("事实:被告人盗窃并诈骗。") == "盗窃;诈骗"
    answer = lm.requests[0].json_schema["properties"]["answer"]
    assert answer["type"] == "array" and set(answer["items"]["enum"]) == CHARGE_LABELS


def test_an_enum_too_large_for_a_schema_is_not_sent() -> None:
    ns = code("_label_schema")
    assert ns["_label_schema"]([f"label number {i}" for i in range(50)], False) is not None
    assert ns["_label_schema"]([f"a long label name number {i}" for i in range(2000)], False) is None


def test_shortlist_constrains_the_model_to_the_classifier_s_likeliest_labels() -> None:
    source = revise(seed("symptom2disease", "retrieval"), "label_shortlist", "shortlist_size_2")
    harness, lm = build(source, first_allowed)
    harness.predict("fever with rash and joint pain")
    allowed = enum_of(lm.requests[0])
    assert len(allowed) == 2 and allowed[0] == "dengue"
    system = lm.requests[0].messages[0]["content"]
    assert system.endswith("Answer with one of: " + "; ".join(allowed) + ".")


def test_label_primed_query_lists_labels_examples_and_contrastive_pairs_and_fits_the_context() -> None:
    source = revise(seed("symptom2disease", "retrieval"), "snap_to_labels", "label_primed_query")
    harness, lm = build(source, first_allowed)
    answer = harness.predict("headache and nausea")
    request = lm.requests[0]
    system, user = request.messages[0]["content"], request.messages[1]["content"]
    assert all(label in system for label in DIAGNOSES)
    assert user.count("Example: ") == 3 and "Similar cases with different labels:" in user
    assert user.rstrip().endswith("Input: headache and nausea\nLabel:")
    assert answer == enum_of(request)[0] and set(enum_of(request)) == set(DIAGNOSES)
    # A small context window: fewer labels and examples, never more than fits.
    many = [{"id": f"m{i}", "input": f"case {i} " + "detail " * 40, "target": f"label {i % 40}"} for i in range(120)]
    harness, lm = build(source, first_allowed, train=many, context_window=1024)
    harness.predict("case 7 " + "detail " * 40)
    request = lm.requests[0]
    prompt = "".join(m["content"] for m in request.messages)
    assert sum(0.3 if ord(ch) < 128 else 2.2 for ch in prompt) + request.max_tokens < 1024
    assert 0 < len(enum_of(request)) < 40


@pytest.mark.parametrize(("draft_by", "calls"), [("model", 2), ("neighbours", 1)])
def test_draft_then_verify_shows_confirmers_and_challengers(draft_by: str, calls: int) -> None:
    source = revise(seed("symptom2disease", "zero_shot"), "draft_verify")
    if draft_by == "neighbours":
        source = revise(source, "draft_by_neighbours")
    harness, lm = build(source, first_allowed)
    answer = harness.predict("sneezing and a stuffy nose")
    assert len(lm.requests) == calls
    verify = lm.requests[-1]
    text = verify.messages[1]["content"]
    draft = text.split("Proposed label: ")[1].split("\n")[0]
    assert draft == ("common cold" if draft_by == "neighbours" else DIAGNOSES[0])
    assert "Similar cases with that label:" in text and "Similar cases with other labels:" in text
    assert enum_of(verify)[0] == draft and len(enum_of(verify)) > 1
    assert answer == draft  # the scripted model confirms the first option


def test_replacing_the_model_call_keeps_the_wrappers_around_it() -> None:
    source = revise(seed("symptom2disease", "few_shot"), "neighbour_vote", "draft_verify")
    tree = ast.parse(source)
    harness_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Harness")
    methods = {n.name: n for n in harness_class.body if isinstance(n, ast.FunctionDef)}
    assert "_predict_before_vote" in methods
    inner = ast.unparse(methods["_predict_before_vote"])
    assert "self._verify.answer(x)" in inner and "self.lm(" not in inner
    assert not get_operator("label_primed_query").applies(source)  # one replacement per harness


def test_the_embedded_model_answers_within_the_enum() -> None:
    """The constrained block on the real embedded model: every answer a label of the training set."""
    pytest.importorskip("llama_cpp")
    from metaharness.models import connect

    model = connect("local:smollm2-135m", cache=False)
    recorder = CallRecorder(ModelRef(model))
    lm = LM(lambda request: recorder(json.loads(json.dumps(request))), 4096)
    module = types.ModuleType("harness_under_test")
    exec(compile(revise(seed("lawbench", "zero_shot"), "constrained_labels"), "harness.py", "exec"), module.__dict__)
    harness = module.Harness(lm, CHARGES)
    for case in ("事实:被告人在超市盗窃手机一部。", "事实:被告人冒充员工诈骗钱财。"):
        answer = harness.predict(case)
        assert answer and set(answer.split(";")) <= CHARGE_LABELS, answer
    assert all(call["parsed"] is not None for call in recorder.calls)
