"""Harness code: task-model calls that know the label set read from the training data. Stdlib only (copied into
harnesses by ``harness_code.definitions``).

- ``_LabelHintLM``: the task model with the list of possible answers added to every system prompt.
- ``_ConstrainedLM``: the task model whose every completion is a JSON-schema call (``lm.json``) with the answer an
  enum of the labels (an array of them for multi-label tasks): the harness builds its prompt as before and gets
  back only labels, joined as the training answers join them. ``allowed`` narrows the enum for one example (a
  shortlist, then also listed in the system prompt). A call that fails (a schema too large for the enum, a prompt
  that no longer fits with the longer answer) falls back to the plain call.
- ``_LabelPrimedQuery``: the Meta-Harness paper's label-primed query: the valid labels listed, one retrieved
  example per label, then contrastive pairs (similar examples with different labels), then the input; one
  constrained call. Labels and examples are ranked by a label scorer and cut to fit ``lm.context_window``.
- ``_DraftVerify``: the paper's draft-then-verify: a draft label from the nearest examples (a constrained call over
  them, or their vote), then its confirmers (nearest examples with that label) and challengers (nearest examples
  with another label) in a second call constrained to the draft and the challengers' labels.

Every token count here is the cautious estimate ``_approx_tokens`` (no tokenizer in a harness).
"""

# What these definitions use from their sibling modules (the imports are not copied; ``definitions`` copies the
# definitions they name).
from metaharness.proposers.operators.harness_answers import _label_atoms, _multi_label
from metaharness.proposers.operators.harness_label_models import (
    _best_terms,
    _decide,
    _LabelClassifier,
    _neighbour_votes,
)
from metaharness.proposers.operators.harness_text_index import _NeighbourIndex

_SCHEMA_CHARS = 30000  # the largest enum schema sent (the evaluator refuses schemas over 32,000 characters)


def _approx_tokens(text):
    """A cautious token estimate without the tokenizer: ~3.3 ASCII characters per token, 2.2 tokens otherwise."""
    return int(sum(0.3 if ord(ch) < 128 else 2.2 for ch in str(text))) + 4


def _label_schema(labels, multi):
    """The JSON schema of ``{"answer": one of labels}`` (multi: a list of 1 to 4 of them); None when it would
    exceed ``_SCHEMA_CHARS``."""
    import json

    item = {"type": "string", "enum": list(labels)}
    answer = {"type": "array", "items": item, "minItems": 1, "maxItems": min(4, len(labels))} if multi else item
    schema = {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}
    return schema if len(json.dumps(schema)) <= _SCHEMA_CHARS else None


def _constrained_labels(lm, messages, labels, multi, max_tokens=0):
    """The labels the model picks among ``labels`` for ``messages`` (one JSON-schema call, room made for the
    longest answer); [] when there is nothing to pick from or the call fails."""
    schema = _label_schema(labels, multi) if labels else None
    if schema is None:
        return []
    longest = max(_approx_tokens(label) for label in labels)
    need = 12 + (longest + 4) * (4 if multi else 1)
    try:
        parsed = lm.json(messages, schema, max_tokens=max(max_tokens, need))
    except lm.Error:
        return []
    answer = parsed.get("answer") if isinstance(parsed, dict) else None
    chosen = answer if isinstance(answer, list) else [answer]
    return list(dict.fromkeys(label for label in chosen if label in labels))


def _as_messages(prompt_or_messages, system):
    """OpenAI-style messages of a prompt string or message list, with ``system`` (if any) as the first."""
    if isinstance(prompt_or_messages, str):
        messages = [{"role": "user", "content": prompt_or_messages}]
    else:
        messages = [dict(m) for m in prompt_or_messages]
    return ([{"role": "system", "content": system}] if system is not None else []) + messages


def _with_system_note(messages, note):
    """``messages`` with ``note`` appended to the system message (one is added when there is none)."""
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


class _LabelHintLM:
    """The task model with the list of possible answers added to every system prompt."""

    def __init__(self, lm, labels):
        self._lm = lm
        self._hint = "Possible answers: " + "; ".join(labels) + "." if labels else ""

    def __getattr__(self, name):
        return getattr(self._lm, name)

    def __call__(self, prompt_or_messages, *, system=None, **options):
        if self._hint:
            system = (system + "\n\n" if system else "") + self._hint
        return self._lm(prompt_or_messages, system=system, **options)


class _ConstrainedLM:
    """The task model with every completion constrained to the labels (see the module docstring)."""

    def __init__(self, lm, labels, multi, joiner=";"):
        self._lm, self.labels, self.multi, self.joiner = lm, list(labels), multi, joiner
        self.allowed = None  # a shortlist for the current example, set by the harness

    def __getattr__(self, name):
        return getattr(self._lm, name)

    def __call__(self, prompt_or_messages, *, system=None, max_tokens=512, **options):
        messages = _as_messages(prompt_or_messages, system)
        allowed = self.allowed or self.labels
        if self.allowed:
            messages = _with_system_note(messages, "Answer with one of: " + "; ".join(allowed) + ".")
        chosen = _constrained_labels(self._lm, messages, allowed, self.multi, max_tokens)
        if chosen:
            return self.joiner.join(chosen)
        return self._lm(prompt_or_messages, system=system, max_tokens=max_tokens, **options)


def _fit_text(text, tokens):
    """The longest prefix of ``text`` whose estimate stays within ``tokens``."""
    text = str(text)
    while text and _approx_tokens(text) > tokens:
        text = text[: int(len(text) * 0.9)]
    return text


class _LabelPrimedQuery:
    """The label-primed query (see the module docstring): ``answer(x)`` -> labels, best first."""

    def __init__(self, lm, train, shot_chars=300, pairs=2, ngram="auto"):
        self.lm, self.train, self.shot_chars, self.pairs = lm, list(train), shot_chars, pairs
        self.scorer = _LabelClassifier(self.train, "centroid", ngram)
        self.index = self.scorer.index
        self.labels = self.scorer.labels
        self.multi = _multi_label(self.train)
        self.by_label: dict = {}
        for i, item in enumerate(self.train):
            for label in _label_atoms(item["target"]):
                self.by_label.setdefault(label, []).append(i)

    def answer(self, x):
        scores = self.scorer.scores(x)
        ranked = sorted(self.labels, key=lambda label: (-scores.get(label, 0.0), label))
        sims = self.index.similarities(x)
        room = int(self.lm.context_window * 0.85) - 120
        query = _fit_text(x, room // 3)
        room -= _approx_tokens(query) + 40
        listed = []
        for label in ranked:  # every label that fits, likeliest first
            if _approx_tokens(label) + 2 > room - 400:
                break
            listed.append(label)
            room -= _approx_tokens(label) + 2
        shots = []
        for label in listed:  # one example per label, the most similar one of it
            best = max(self.by_label[label], key=lambda i: sims[i])
            shot = f"Example: {_fit_text(self.train[best]['input'][: self.shot_chars], 200)}\nLabel: {label}"
            if _approx_tokens(shot) > room:
                break
            shots.append(shot)
            room -= _approx_tokens(shot)
        contrast: list = []
        targets = set()
        for i in sorted(range(len(self.train)), key=lambda i: -sims[i]):
            # similar examples, each with a label set the more similar ones did not have
            target = self.train[i]["target"]
            if len(contrast) >= 2 * self.pairs:
                break
            if target in targets:
                continue
            case = f"Case: {_fit_text(self.train[i]['input'][: self.shot_chars], 200)}\nLabel: {target}"
            if _approx_tokens(case) > room:
                break
            contrast.append(case)
            targets.add(target)
            room -= _approx_tokens(case)
        lines = [*shots, *(["Similar cases with different labels:", *contrast] if len(contrast) > 1 else [])]
        system = "Give the label of the last input. Valid labels: " + "; ".join(listed) + "."
        user = "\n\n".join([*lines, f"Input: {query}\nLabel:"])
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        chosen = _constrained_labels(self.lm, messages, listed, self.multi)
        return chosen or _decide(scores, [], 0.0, 1.0)[:1]


class _DraftVerify:
    """Draft-then-verify (see the module docstring): ``answer(x)`` -> labels, best first. ``draft_by`` "model"
    asks the model for the draft over the ``k`` nearest examples; "neighbours" takes their vote (no first call)."""

    def __init__(self, lm, train, k=5, checks=2, shot_chars=300, draft_by="model", ngram="auto"):
        self.lm, self.train, self.k, self.checks, self.shot_chars = lm, list(train), k, checks, shot_chars
        self.draft_by = draft_by
        self.index = _NeighbourIndex(self.train, _best_terms(self.train, (0, 2, 3)) if ngram == "auto" else ngram)
        self.labels = sorted({label for item in self.train for label in _label_atoms(item["target"])})
        self.multi = _multi_label(self.train)

    def _case(self, i):
        return _fit_text(self.train[i]["input"][: self.shot_chars], 200)

    def answer(self, x):
        sims = self.index.similarities(x)
        nearest = sorted(range(len(self.train)), key=lambda i: -sims[i])
        room = int(self.lm.context_window * 0.85) - 120
        query = _fit_text(x, room // 3)
        room -= _approx_tokens(query)
        votes = _neighbour_votes([(sims[i], self.train[i]["target"]) for i in nearest[: self.k]])
        draft = _decide(votes, [], 0.0, 1.0)[:1]
        if self.draft_by == "model":
            turns = []
            for i in nearest[: self.k]:
                turn = f"Case: {self._case(i)}\nLabel: {self.train[i]['target']}"
                if _approx_tokens(turn) > room - 200:
                    break
                turns.append(turn)
            prompt = "\n\n".join([*reversed(turns), f"Case: {query}\nLabel:"])
            draft = _constrained_labels(self.lm, prompt, self.labels, self.multi) or draft
        if not draft:
            return []
        names = set(draft)
        confirm = [i for i in nearest if names & set(_label_atoms(self.train[i]["target"]))][: self.checks]
        challenge = [i for i in nearest if not names & set(_label_atoms(self.train[i]["target"]))][: self.checks]
        options = list(dict.fromkeys([*draft, *(a for i in challenge for a in _label_atoms(self.train[i]["target"]))]))
        lines = [f"Proposed label: {'; '.join(draft)}", "Similar cases with that label:"]
        lines += [f"Case: {self._case(i)}\nLabel: {self.train[i]['target']}" for i in confirm]
        lines.append("Similar cases with other labels:")
        lines += [f"Case: {self._case(i)}\nLabel: {self.train[i]['target']}" for i in challenge]
        while lines and _approx_tokens("\n\n".join(lines)) > room:
            lines.pop()
        system = "Check the proposed label of the last case against similar cases; answer the right label."
        user = "\n\n".join([*lines, f"Case: {query}\nLabel:"])
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return _constrained_labels(self.lm, messages, options, self.multi) or draft
