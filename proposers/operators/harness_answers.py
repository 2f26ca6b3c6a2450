"""Harness code: the labels an answer names, the training label vocabulary, and answers written back in the
metric's format. Stdlib only, imports inside each function: operators copy these definitions into the harnesses
they write (``editing.copied``), which run sandboxed with nothing but the standard library.

Answers keep the format the metric reads: the span inside ``[TAG]...[/TAG]`` or ``[TAG]...<eoa>`` is replaced,
tags kept; an untagged answer is replaced whole, labels joined with ``;``. A training target is the gold answer in
the form the metric reads (the ``Task`` contract), so a harness that answers from scratch writes labels the way the
training targets join them (``_label_joiner``).
"""


def _label_atoms(answer):
    """The labels an answer names: split on the first list separator present (; ； , ，), stripped."""
    text = str(answer).strip()
    separator = next((s for s in (";", "；", ",", "，") if s in text), None)
    return [part.strip() for part in (text.split(separator) if separator else [text]) if part.strip()]


def _known_labels(train):
    """Every distinct label of the training answers (each label of a multi-label answer counts), any number."""
    return sorted({label for item in train for label in _label_atoms(item["target"])})


def _label_counts(train):
    """How many training answers name each label."""
    from collections import Counter

    return Counter(label for item in train for label in _label_atoms(item["target"]))


def _multi_label(train):
    """Whether at least a tenth of the training answers name several labels."""
    return sum(len(_label_atoms(item["target"])) > 1 for item in train) * 10 >= max(1, len(train))


def _label_joiner(train):
    """The separator the training answers put between labels (``;`` when none names several)."""
    from collections import Counter

    used = Counter(
        next((s for s in (";", "；", ",", "，") if s in str(item["target"])), "")
        for item in train
        if len(_label_atoms(item["target"])) > 1
    )
    return used.most_common(1)[0][0] if used else ";"


def _answer_span(text):
    """(start, end) of the answer in ``[TAG]answer[/TAG]`` or ``[TAG]answer<eoa>`` (else after a lone ``[TAG]``),
    else of the whole text."""
    import re

    match = re.search(r"\[([^\[\]/]+)\](.*?)(?:\[/\1\]|<eoa>)", text, re.S) or re.search(
        r"\[([^\[\]/]+)\](.*)$", text, re.S
    )
    return (match.start(2), match.end(2)) if match else (0, len(text))


def _snap_label(text, labels):
    """The label the text names: exact after normalising, else the longest label mentioned, else the closest
    spelling (difflib ratio >= 0.6), else None."""
    import difflib
    import re

    def norm(value):
        return re.sub(r"[\s_]+", " ", re.sub(r"[.!?,;:'\"。！？]+$", "", value.strip().lower()))

    by_norm = {norm(label): label for label in labels}
    said = norm(text)
    if said in by_norm:
        return by_norm[said]
    mentioned = [(said.find(key), -len(key), label) for key, label in by_norm.items() if key and key in said]
    if mentioned:
        return min(mentioned)[2]
    close = difflib.get_close_matches(said, list(by_norm), n=1, cutoff=0.6)
    return by_norm[close[0]] if close else None


def _snap_labels(text, labels):
    """Each label the answer text names, snapped to the vocabulary, in order, without repeats."""
    snapped = [_snap_label(part, labels) for part in _label_atoms(text)]
    return list(dict.fromkeys(label for label in snapped if label))


def _with_answer(text, labels):
    """The response with its answer span replaced by ``labels`` joined with ";" (tags kept)."""
    answer = ";".join(labels)
    start, end = _answer_span(text)
    return text[:start] + answer + text[end:] if (start, end) != (0, len(text)) else answer
