"""The building blocks in words, for a proposer that writes harnesses itself (the coding proposer's workspace).

One entry per block: what it does, when it is worth trying, the offline library's operators that add it, and the
harness code that implements it (``harness_code.definitions`` names, which a model can copy into a harness: a
harness is one file, stdlib only). ``catalogue_markdown`` renders the list; ``block_code`` is every definition in
one file.
"""

from __future__ import annotations

from dataclasses import dataclass

from metaharness.proposers.operators.harness_code import definitions, names


@dataclass(frozen=True)
class Block:
    name: str
    what: str
    when: str
    operators: tuple[str, ...]
    code: tuple[str, ...]


BLOCKS: tuple[Block, ...] = (
    Block(
        "label vocabulary and snapping",
        "the distinct labels of the training answers (multi-label answers split on ; , etc.); an answer's labels "
        "snapped to the nearest known label, written back in the answer's own format (tags kept)",
        "any task whose answers are labels; the model misspells or paraphrases labels",
        ("snap_to_labels",),
        ("_known_labels", "_snap_labels", "_answer_span", "_with_answer"),
    ),
    Block(
        "neighbour vote",
        "the labels of the K most similar training inputs (TF-IDF or BM25 over words or character n-grams), each "
        "weighted by similarity to a power, optionally divided by label frequency; the model's labels added at a "
        "weight (0: the model is ignored)",
        "label tasks where similar inputs share labels; a strong model-free baseline to beat",
        ("neighbour_vote", "vote_k9", "index_bm25", "vote_power_4.0", "vote_prior_0.5", "vote_weight_1.0"),
        ("_NeighbourIndex", "_neighbour_votes", "_prior_corrected", "_decide"),
    ),
    Block(
        "self-tuning neighbour vote",
        "the neighbour vote with its terms, K, similarity power, frequency correction and label-set share chosen "
        "in __init__ by leave-one-out on the training examples the harness receives (any of them can be fixed)",
        "whenever a vote is worth trying: its settings come from the training data, not from the few validation "
        "examples a search scores",
        ("tuned_vote", "tuned_vote_w0.5"),
        ("_TunedVote", "_decide"),
    ),
    Block(
        "label classifier",
        "a classifier trained in __init__ on the training examples (nearest centroid, naive Bayes or softmax "
        "regression over TF-IDF terms; terms chosen by leave-one-out); scores per label, mixed with the model's "
        "labels by a weight; kind 'auto' chooses the kind and terms by 3-fold cross-validation on the training "
        "examples",
        "label tasks with a few examples per label: it generalises better than a vote of the nearest few",
        ("classifier_auto", "classifier_centroid", "classifier_logistic", "classifier_weight_0.5"),
        ("_LabelClassifier", "_decide"),
    ),
    Block(
        "answers constrained to the labels",
        "every model call made through lm.json with a JSON-schema enum of the labels (an array of them for "
        "multi-label tasks); falls back to the plain call when the constrained one fails",
        "the model answers outside the label set or in the wrong format",
        ("constrained_labels",),
        ("_ConstrainedLM",),
    ),
    Block(
        "shortlist",
        "the model chooses among the N labels a classifier ranks first for this input (constrained, listed)",
        "the classifier's top few usually hold the answer but its first choice is often wrong",
        ("label_shortlist", "shortlist_size_5"),
        ("_ConstrainedLM", "_LabelClassifier"),
    ),
    Block(
        "label-primed query",
        "the Meta-Harness paper's prompt: every valid label that fits listed, one similar training example per "
        "label, then contrastive pairs (similar examples with different labels), the answer constrained",
        "the model confuses neighbouring labels; the label list fits the context window",
        ("label_primed_query",),
        ("_LabelPrimedQuery",),
    ),
    Block(
        "draft then verify",
        "a draft label from the nearest examples (a first call or their vote), then a second call showing examples "
        "that confirm it and similar ones that challenge it, constrained to the draft and the challengers' labels",
        "the first guess is often right but near misses are common",
        ("draft_verify", "draft_by_neighbours"),
        ("_DraftVerify",),
    ),
    Block(
        "two candidates combined",
        "two harnesses in one file (each source a string, exec'ed into its own namespace): fall back from one to "
        "the other, or keep the label both name and let a classifier break ties",
        "two good candidates that are right on different examples",
        ("combine_fallback+ID", "combine_vote+ID"),
        ("_load_harness", "_answer_or_error"),
    ),
)


def catalogue_markdown() -> str:
    """The blocks as a Markdown list (for a workspace README)."""
    lines = [
        "## Building blocks",
        "",
        "Tested, stdlib-only code for label tasks is in blocks.py: copy the definitions a block names into your",
        "harness (a harness is one file). Each block works on any task through `train` alone.",
        "",
    ]
    for block in BLOCKS:
        lines.append(f"- **{block.name}**: {block.what}. When: {block.when}. Code: {', '.join(block.code)}.")
    return "\n".join(lines) + "\n"


def block_code() -> str:
    """Every harness-code definition in one file, each with what it uses."""
    header = '"""Building blocks for harnesses: copy the definitions you need (stdlib only)."""\n\n\n'
    return header + "\n\n\n".join(definitions(*names()).values()) + "\n"
