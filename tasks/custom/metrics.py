"""Metrics for your own task: the built-ins and a Python metric function, all held to the ``Task.score`` contract.

A metric turns one answer into ``{"primary": x, ...}``: ``primary`` is what a search maximises (higher is better,
in [0, 1]), the other keys are secondary metrics reported beside it, and the keys are the same for every answer
(``Metric.names``). A metric never raises for a bad answer: an empty, malformed or unparsable prediction scores
0 on every key.

Built-ins, by the name the task file gives in ``[metric] name``:

- ``exact``: the answer equals the target after stripping surrounding whitespace.
- ``normalized_exact``: equality after ``normalize`` (Unicode NFKC, case folded, runs of whitespace collapsed,
  surrounding quotes, brackets and ``.,;:!?`` stripped).
- ``regex``: the first match of ``pattern`` (its first group, else the whole match) in the prediction, compared
  normalised with the same match in the target (the whole target when it has none, e.g. GSM8K's ``#### 72``). A
  prediction without a match scores 0. ``pattern`` defaults to the answer convention's.
- ``set_f1``: the answer and the target as sets of items split on ``separator`` (a regular expression, default
  commas, semicolons and line breaks), each item normalised; ``primary`` is the F1 of the two sets, with
  ``precision``, ``recall`` and ``exact`` (set equality) beside it. Two empty sets agree.
- ``jaccard``: the same sets; ``primary`` is their Jaccard index, ``exact`` set equality.
- ``numeric``: the last number in the answer and in the target (thousands separators and a leading ``$`` or
  trailing ``%`` allowed) are equal within ``abs_tol`` (default 1e-6) or ``rel_tol`` (default 0).
- ``choice``: multiple choice among ``choices`` (default the answer convention's, else A-D). The chosen option is
  the answer itself when it is one of them, else the option after "answer", "option" or "choice", else the first
  one mentioned (a one-letter option only counts when written like ``(B)``, ``B)``, ``B.`` or ``B:``). Letters
  compare case-sensitively, words case-insensitively. A target given as a number is an index into ``choices``.

Except for ``regex``, a built-in first reads the answer out of the prediction with the task's answer convention
(``Answer``): the first match of ``answer.pattern`` when there is one, else the whole prediction.

A Python metric (``[metric] file = "metric.py"``, ``function = "score"``) is the user's own code, called as
``score(prediction, target)`` or ``score(prediction, target, row)`` (``row``: the example's stored row) with the
raw prediction. It returns a number (or bool) in [0, 1], or a dict with ``"primary"`` first. The wrapper holds it
to the contract: an exception for one answer scores it 0 (the first one is reported on stderr); a value that is
not a finite number in [0, 1], or a dict without ``primary``, is a broken metric and raises
``InputError`` naming the file, the function and the example. The keys are those of its
first result (missing ones later score 0, extra ones are dropped).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import re
import sys
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from metaharness.errors import InputError
from metaharness.tasks.protocol import Example

Scores = dict[str, float]
BUILTIN_METRICS = ("exact", "normalized_exact", "regex", "set_f1", "jaccard", "numeric", "choice")
DEFAULT_SEPARATOR = r"[,;\n]"
DEFAULT_CHOICES = ("A", "B", "C", "D")
_STRIP = " \t\r\n\"'`.,;:!?()[]{}<>"
_NUMBER = re.compile(r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?%?")
_MARKER = r"(?i:answer|option|choice)\s*(?:is|:|=)?\s*[\(\[]?"


def normalize(text: str) -> str:
    """Unicode NFKC, case folded, whitespace runs collapsed, surrounding quotes, brackets and ``.,;:!?`` stripped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", text).strip(_STRIP)


def first_match(pattern: re.Pattern[str], text: str) -> str | None:
    """The first match's first group (the whole match when the pattern has no group), or None."""
    match = pattern.search(text)
    if match is None:
        return None
    return match.group(1) if pattern.groups else match.group(0)


def compile_pattern(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.S)
    except re.error as exc:
        raise InputError(f"{where} is not a valid regular expression ({exc}): {pattern!r}.") from None


@dataclass(frozen=True)
class Answer:
    """The task's answer convention: what the model is asked for and how the metric reads it back.

    ``instruction`` tells the model how to answer (the standard seeds put it in their prompt); ``template`` writes
    a gold target the way an answer should look (``"<answer>{target}</answer>"``; few-shot seeds show training
    targets this way); ``pattern`` reads the answer out of a prediction (first group of its first match);
    ``choices``: the allowed answers when there is a fixed set (labels or option letters).
    """

    instruction: str = ""
    template: str = "{target}"
    pattern: str | None = None
    choices: tuple[str, ...] = ()
    compiled: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_settings(
        cls, instruction: str = "", template: str = "{target}", pattern: str | None = None, choices: object = ()
    ) -> Answer:
        if "{target}" not in template:
            raise InputError(f"answer.template must contain {{target}}, got {template!r}.")
        if not isinstance(choices, (list, tuple)) or not all(isinstance(c, str) and c.strip() for c in choices):
            raise InputError(f"answer.choices must be a list of non-empty strings, got {choices!r}.")
        compiled = compile_pattern(pattern, "answer.pattern") if pattern else None
        return cls(instruction, template, pattern, tuple(c.strip() for c in choices), compiled)

    def read(self, prediction: str) -> str:
        """The answer in ``prediction``: the pattern's first match when it matches, else the whole text."""
        if self.compiled is not None:
            found = first_match(self.compiled, prediction)
            if found is not None:
                return found
        return prediction

    def write(self, target: str) -> str:
        """``target`` written as an answer following the convention (``template`` filled in)."""
        return self.template.replace("{target}", target)


@dataclass(frozen=True)
class Metric:
    """A metric bound to its options: ``names`` the keys it returns (``"primary"`` first), ``score`` the function.
    ``reads_answer``: the prediction goes through the answer convention first (the built-ins but ``regex``)."""

    name: str
    names: tuple[str, ...]
    score: Callable[[str, Example], Scores]
    reads_answer: bool = True

    def zeros(self) -> Scores:
        return dict.fromkeys(self.names, 0.0)


# ---------------------------------------------------------------- the built-ins


def _items(text: str, separator: re.Pattern[str]) -> set[str]:
    return {item for item in (normalize(part) for part in separator.split(text)) if item}


def _set_scores(predicted: set[str], true: set[str]) -> tuple[float, float, float, float]:
    """(precision, recall, F1, Jaccard) of two sets; two empty sets agree fully."""
    if not predicted and not true:
        return 1.0, 1.0, 1.0, 1.0
    hits = len(predicted & true)
    precision = hits / len(predicted) if predicted else 0.0
    recall = hits / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return precision, recall, f1, hits / len(predicted | true)


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (``1,234.5``, ``-3``, ``2e-3``, ``$12``, ``45%``), or None."""
    for match in reversed(list(_NUMBER.finditer(text))):
        token = match.group().replace(",", "").replace("$", "").rstrip("%")
        if any(ch.isdigit() for ch in token):
            try:
                return float(token)
            except ValueError:
                continue
    return None


def chosen_option(answer: str, choices: tuple[str, ...]) -> str | None:
    """The option ``answer`` picks among ``choices`` (rules in the module docstring), or None."""

    def same(a: str, b: str) -> bool:
        return a == b if len(b) == 1 else normalize(a) == normalize(b)

    whole = answer.strip().strip(_STRIP)
    for choice in choices:
        if same(whole, choice):
            return choice
    mentions: list[tuple[int, int, str]] = []
    for choice in choices:
        letter = len(choice) == 1
        word = re.escape(choice)
        flags = 0 if letter else re.I  # the keyword is case-insensitive either way
        marked = re.search(_MARKER + word + r"(?!\w)", answer, flags)
        if marked is not None:
            mentions.append((0, marked.start(), choice))  # an explicit answer wins over any other mention
            continue
        shaped = r"(?<!\w)(?:\(" + word + r"\)|" + word + r"[\).:])" if letter else r"(?<!\w)" + word + r"(?!\w)"
        found = re.search(shaped, answer, flags)
        if found is not None:
            mentions.append((1, found.start(), choice))
    if not mentions:
        return None
    return min(mentions, key=lambda m: (m[0], m[1], -len(m[2])))[2]


def _check_options(name: str, options: Mapping[str, object], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "no options"
        raise InputError(f"Metric {name} does not take {', '.join(unknown)} (it takes {takes}).")


def _number_option(name: str, options: Mapping[str, object], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"Metric {name}: {key} must be a number >= 0, got {value!r}.")
    return float(value)


def builtin_metric(name: str, options: Mapping[str, object], answer: Answer) -> Metric:
    """The built-in metric ``name`` with its ``options`` (keys in the module docstring); InputError otherwise."""
    if name in ("exact", "normalized_exact"):
        _check_options(name, options, ())
        if name == "exact":
            return Metric(name, ("primary",), lambda p, ex: {"primary": float(p.strip() == ex.target.strip())})
        return Metric(name, ("primary",), lambda p, ex: {"primary": float(normalize(p) == normalize(ex.target))})
    if name == "regex":
        _check_options(name, options, ("pattern",))
        text = options.get("pattern", answer.pattern)
        if not text or not isinstance(text, str):
            raise InputError("Metric regex needs a pattern: set [metric] pattern or answer.pattern in the task file.")
        pattern = compile_pattern(text, "metric.pattern")

        def regex(prediction: str, example: Example) -> Scores:
            found = first_match(pattern, prediction)
            if found is None:
                return {"primary": 0.0}
            gold = first_match(pattern, example.target)
            return {"primary": float(normalize(found) == normalize(example.target if gold is None else gold))}

        return Metric(name, ("primary",), regex, reads_answer=False)
    if name in ("set_f1", "jaccard"):
        _check_options(name, options, ("separator",))
        separator = compile_pattern(str(options.get("separator", DEFAULT_SEPARATOR)), "metric.separator")

        def sets(prediction: str, example: Example) -> Scores:
            predicted, true = _items(prediction, separator), _items(example.target, separator)
            precision, recall, f1, jaccard = _set_scores(predicted, true)
            exact = float(predicted == true)
            if name == "jaccard":
                return {"primary": jaccard, "exact": exact}
            return {"primary": f1, "precision": precision, "recall": recall, "exact": exact}

        names = ("primary", "exact") if name == "jaccard" else ("primary", "precision", "recall", "exact")
        return Metric(name, names, sets)
    if name == "numeric":
        _check_options(name, options, ("abs_tol", "rel_tol"))
        abs_tol = _number_option(name, options, "abs_tol", 1e-6)
        rel_tol = _number_option(name, options, "rel_tol", 0.0)

        def numeric(prediction: str, example: Example) -> Scores:
            predicted, true = last_number(prediction), last_number(example.target)
            if predicted is None or true is None:
                return {"primary": 0.0}
            return {"primary": float(math.isclose(predicted, true, rel_tol=rel_tol, abs_tol=abs_tol))}

        return Metric(name, ("primary",), numeric)
    if name == "choice":
        _check_options(name, options, ("choices",))
        given = options.get("choices", answer.choices or DEFAULT_CHOICES)
        if (
            not isinstance(given, (list, tuple))
            or not given
            or not all(isinstance(c, str) and c.strip() for c in given)
        ):
            raise InputError(f"Metric choice: choices must be a non-empty list of strings, got {given!r}.")
        choices = tuple(str(c).strip() for c in given)

        def choice(prediction: str, example: Example) -> Scores:
            picked = chosen_option(prediction, choices)
            gold = chosen_option(example.target, choices)
            return {"primary": float(picked is not None and picked == gold)}

        return Metric(name, ("primary",), choice)
    raise InputError(f"Unknown metric '{name}': use one of {', '.join(BUILTIN_METRICS)}, or python (file = ...).")


# ---------------------------------------------------------------- a Python metric function


def load_function(path: Path, function: str) -> Callable[..., object]:
    """``function`` from the Python file ``path`` (imported under a private module name); InputError otherwise."""
    if not path.is_file():
        raise InputError(f"Metric file {path} does not exist; name a .py file beside task.toml ([metric] file).")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"metaharness_user_metric_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"Metric file {path} cannot be imported as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise InputError(f"Importing the metric file {path} failed: {type(exc).__name__}: {exc}") from exc
    found = getattr(module, function, None)
    if not callable(found):
        raise InputError(f"The metric file {path} defines no function {function}() ([metric] function).")
    return found


class PythonMetric:
    """A user's metric function held to the contract (see the module docstring)."""

    def __init__(self, path: Path, function: str) -> None:
        self.where = f"{path.name}:{function}()"
        self.function = load_function(path, function)
        try:
            positional = [
                p
                for p in inspect.signature(self.function).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            ]
        except (TypeError, ValueError):
            positional = []
        self.takes_row = len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in positional)
        self.names: tuple[str, ...] | None = None
        self.reported = False

    def _call(self, prediction: str, example: Example) -> object:
        if self.takes_row:
            return self.function(prediction, example.target, dict(example.raw))
        return self.function(prediction, example.target)

    def _checked(self, value: object, example: Example) -> Scores:
        if isinstance(value, dict):
            if "primary" not in value:
                raise InputError(f"{self.where} returned a dict without 'primary' for example {example.id}: {value!r}.")
            items = [("primary", value["primary"])] + [(k, v) for k, v in value.items() if k != "primary"]
        else:
            items = [("primary", value)]
        scores: Scores = {}
        for key, number in items:
            ok = isinstance(number, (int, float)) and math.isfinite(float(number)) and 0.0 <= float(number) <= 1.0
            if not ok:
                raise InputError(
                    f"{self.where} returned {key}={number!r} for example {example.id}: a score must be a number in "
                    "[0, 1] (or a bool). Fix the metric function."
                )
            scores[str(key)] = float(number)
        return scores

    def __call__(self, prediction: str, example: Example) -> Scores:
        try:
            value = self._call(prediction, example)
        except Exception as exc:  # a bad answer the user's code did not expect: it scores 0 (contract)
            if not self.reported:
                self.reported = True
                print(
                    f"note: {self.where} raised {type(exc).__name__}: {exc} for example {example.id}; "
                    "answers it cannot score get 0",
                    file=sys.stderr,
                )
            return dict.fromkeys(self.names or ("primary",), 0.0)
        scores = self._checked(value, example)
        if self.names is None:
            self.names = tuple(scores)
        return {key: scores.get(key, 0.0) for key in self.names}

    def metric(self, probe: Example, answer: str) -> Metric:
        """The bound ``Metric``, after one check: ``answer`` (the probe's target written as an answer) must
        score without an exception and within the contract; its result fixes the metric's keys."""
        try:
            value = self._call(answer, probe)
        except Exception as exc:
            raise InputError(
                f"{self.where} raised {type(exc).__name__}: {exc} when scoring example {probe.id}'s own target; it "
                "must score every answer (0 for a bad one). Fix the metric function."
            ) from exc
        self.names = tuple(self._checked(value, probe))
        return Metric("python", self.names, self, reads_answer=False)


def make_metric(settings: Mapping[str, object], answer: Answer, folder: Path | None, probe: Example | None) -> Metric:
    """The metric a task file's ``[metric]`` table describes (``name`` or ``file``, plus the metric's options).

    ``folder`` is where a metric ``file`` is looked up; ``probe`` is an example used to check a Python metric once
    (and to learn its keys) before any run.
    """
    options = dict(settings)
    if "file" in options or options.get("name") == "python":
        file, function = options.pop("file", None), options.pop("function", "score")
        options.pop("name", None)
        if not file:
            raise InputError('A python metric needs its file: [metric] file = "metric.py" (function = "score").')
        _check_options("python", options, ())
        if probe is None:
            raise InputError("A python metric needs at least one example to check it on; the splits are empty.")
        path = Path(str(file)) if folder is None else folder / str(file)
        return PythonMetric(path, str(function)).metric(probe, answer.write(probe.target))
    name = str(options.pop("name", "normalized_exact"))
    return builtin_metric(name, options, answer)
