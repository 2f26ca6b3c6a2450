"""What a search may spend, in what users pay: example-evaluations, model tokens and dollars.

One typed value goes from the command line to the solver. ``Spend`` is an amount (what was spent, or what a
plan is predicted to spend); ``Budget`` is a limit per entry, ``math.inf`` where nothing is capped;
``SearchBudget`` is every limit of a run in one value, the one the loop, the run's ledger, the proposers and the
solver read:

- ``per_iteration``: what one iteration's task-model calls may spend, whatever they are for: the proposer's
  predictions (probes on training examples), the checks of new candidates and the staged evaluation on validation
  examples are spent from this one budget (`Meter` keeps what the predictions may still spend); when its ``evals``
  are not capped they are ``evals_per_iter`` full evaluations' worth (`SearchBudget.iteration_limit`);
- ``per_run``: what the whole run may spend over every session: ``evals`` counts task-model example-evaluations
  (validation, probes, checks), ``tokens`` and ``usd`` count every model call of the run (the proposer model's
  too): they are the money caps (``--max-tokens``, ``--max-cost``) the run's ledger holds every call to.

An example-evaluation is one harness run on one example (a validation example, a probe's training example, or the
instantiation a check makes) that cost something; its calls' tokens and dollars count in ``tokens`` and ``usd``.

Spend is counted per run: a model call costs its tokens and dollars the first time this run makes it, and an
example-evaluation counts when at least one of its calls cost something. A call the run already made (the response
cache answers it) costs nothing, so a revision that leaves the prompts alone costs almost nothing to evaluate on
examples its parent was evaluated on. A call the cache answers because *another* run made it still counts, so a
run's spend, and every choice that depends on it, is the same on a cold or a warm cache.

Budgets are validated once, when they are made (``Budget`` and ``SearchBudget`` check their entries; ``Budget.parse``
reads the command line's form); everything downstream trusts them.

>>> b = Budget.parse("evals=150,usd=0.5")
>>> b.evals, b.tokens, b.usd
(150.0, inf, 0.5)
>>> b.allows(Spend(evals=100, usd=0.2)), b.allows(Spend(evals=151))
(True, False)
>>> b.left(Spend(evals=100, usd=0.2))
Budget(evals=50.0, tokens=inf, usd=0.3)
>>> str(Budget(evals=150))
'evals=150'
>>> SearchBudget(per_run=Budget(usd=1.0)).iteration_limit(share=20)
Budget(evals=60.0, tokens=inf, usd=inf)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from metaharness.errors import InputError
from metaharness.setting import Setting, at_least, by_name

ENTRIES = ("evals", "tokens", "usd")
# Full evaluations' worth of example-evaluations an iteration may spend when its evals are not capped otherwise.
DEFAULT_EVALS_PER_ITER = 3
# Rounding slack when a total is compared with a limit (sums of floats, dollars to 1e-9).
TOLERANCE = 1e-9


def _number(name: str, value: object, *, allow_inf: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"Budget entry {name} must be a number, got {value!r}.")
    number = float(value)
    if math.isnan(number) or number < 0 or (math.isinf(number) and not allow_inf):
        raise InputError(f"Budget entry {name} must be a {'' if allow_inf else 'finite '}number >= 0, got {value!r}.")
    return number


@dataclass(frozen=True)
class Spend:
    """An amount of each entry: spent so far, or predicted for a plan. Entries are finite and >= 0."""

    evals: float = 0.0
    tokens: float = 0.0
    usd: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.evals + other.evals, self.tokens + other.tokens, self.usd + other.usd)

    def __sub__(self, other: Spend) -> Spend:
        """The difference, floored at 0 per entry (a spend never goes negative)."""
        return Spend(
            max(0.0, self.evals - other.evals), max(0.0, self.tokens - other.tokens), max(0.0, self.usd - other.usd)
        )

    def scaled(self, factor: float) -> Spend:
        return Spend(self.evals * factor, self.tokens * factor, self.usd * factor)

    def vector(self) -> tuple[float, float, float]:
        return (self.evals, self.tokens, self.usd)

    def to_json(self) -> dict[str, float]:
        return {"evals": round(self.evals, 6), "tokens": round(self.tokens, 3), "usd": round(self.usd, 9)}

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> Spend:
        """A spend from its JSON form (missing entries are 0); InputError naming a bad entry."""
        data = data or {}
        return cls(*(_number(k, data.get(k, 0.0), allow_inf=False) for k in ENTRIES))

    def __str__(self) -> str:
        return f"{self.evals:g} evals, {self.tokens:,.0f} tokens, ${self.usd:.4f}"


@dataclass(frozen=True)
class Budget:
    """A limit per entry (``math.inf``: not capped). ``evals`` counts example-evaluations."""

    evals: float = math.inf
    tokens: float = math.inf
    usd: float = math.inf

    def __post_init__(self) -> None:
        for f in fields(self):
            _number(f.name, getattr(self, f.name), allow_inf=True)

    @classmethod
    def checked(cls, data: Mapping[str, object] | None) -> Budget:
        """A budget from a mapping of named limits (absent or ``None``: not capped); InputError naming an unknown
        entry (with the known ones) or a bad value."""
        data = dict(data or {})
        unknown = sorted(k for k in data if k not in ENTRIES)
        if unknown:
            raise InputError(
                f"Unknown budget entr{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}: use "
                f"{', '.join(ENTRIES)}."
            )
        # Checked once, when made (__post_init__); an int limit stays one (as written).
        return cls(**{k: math.inf if data.get(k) is None else data[k] for k in ENTRIES})  # type: ignore[arg-type]

    @classmethod
    def parse(cls, text: str, *, option: str = "--budget") -> Budget:
        """``evals=150,tokens=300000,usd=0.5`` (any subset; each entry once); InputError with one line otherwise."""
        entries: dict[str, float] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, sep, value = part.partition("=")
            key = key.strip()
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not sep or math.isnan(number):
                raise InputError(
                    f"{option} takes KEY=NUMBER entries separated by commas (e.g. evals=150,tokens=300000,usd=0.5), "
                    f"got {part!r}."
                )
            if key in entries:
                raise InputError(f"{option} names {key} twice.")
            entries[key] = number
        if not entries:
            raise InputError(f"{option} is empty: give entries such as evals=150,tokens=300000,usd=0.5.")
        try:
            return cls.checked(entries)
        except InputError as exc:
            raise InputError(f"{option}: {exc}") from None

    def allows(self, spend: Spend) -> bool:
        """Whether ``spend`` stays within every entry."""
        return all(s <= b + TOLERANCE * max(1.0, b) for s, b in zip(spend.vector(), self.vector(), strict=True))

    def left(self, spent: Spend) -> Budget:
        """What remains after ``spent`` (never below 0)."""
        return Budget(*(max(0.0, b - s) for b, s in zip(self.vector(), spent.vector(), strict=True)))

    def tightest(self, other: Budget) -> Budget:
        """The smaller limit of each entry."""
        return Budget(*(min(a, b) for a, b in zip(self.vector(), other.vector(), strict=True)))

    def exhausted(self) -> bool:
        """Nothing more can be spent: some entry is at 0."""
        return any(b <= TOLERANCE for b in self.vector())

    def vector(self) -> tuple[float, float, float]:
        return (self.evals, self.tokens, self.usd)

    def capped(self) -> dict[str, float]:
        """The capped entries only."""
        return {k: v for k, v in zip(ENTRIES, self.vector(), strict=True) if math.isfinite(v)}

    def to_json(self) -> dict[str, float | None]:
        """Every entry, ``None`` where nothing is capped (JSON has no infinity)."""
        return {k: (v if math.isfinite(v) else None) for k, v in zip(ENTRIES, self.vector(), strict=True)}

    def __str__(self) -> str:
        capped = self.capped()
        return ",".join(f"{k}={v:g}" for k, v in capped.items()) if capped else "unlimited"


@dataclass
class Meter:
    """What one part of an iteration may spend (``allowance``) and has spent so far: the proposer's predictions
    read it from ``RunState.predicting`` before each probe (`affords`) and `charge` what the probe cost; the loop
    takes ``spent`` out of the iteration's budget before it evaluates.

    >>> meter = Meter(Budget(evals=10))
    >>> meter.affords(Spend(evals=8)), meter.charge(Spend(evals=8)), meter.affords(Spend(evals=3))
    (True, None, False)
    >>> meter.left()
    Budget(evals=2.0, tokens=inf, usd=inf)
    """

    allowance: Budget = Budget()
    spent: Spend = Spend()

    def left(self) -> Budget:
        return self.allowance.left(self.spent)

    def affords(self, cost: Spend) -> bool:
        """Whether ``cost`` more stays within the allowance."""
        return self.allowance.allows(self.spent + cost)

    def charge(self, cost: Spend) -> None:
        self.spent = self.spent + cost


def parse_usd(text: str, option: str = "--max-cost") -> float:
    """A dollar amount from the command line: a finite number >= 0; InputError with one line otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{option} takes an amount of USD >= 0 (e.g. {option} 5), got '{text}'.")
    return value


def parse_tokens(text: str, option: str = "--max-tokens") -> int:
    """A number of tokens from the command line: a whole number >= 0; InputError with one line otherwise."""
    if not text.strip().isdigit():
        raise InputError(f"{option} takes a whole number of tokens >= 0 (e.g. {option} 300000), got '{text}'.")
    return int(text)


def _a_budget(value: object, flag: str) -> None:
    if not isinstance(value, Budget):
        raise InputError(f"{flag} takes a Budget (e.g. Budget(usd=1.0)), got {value!r}.")


def _iteration_budget(value: object, flag: str) -> None:
    _a_budget(value, flag)
    if isinstance(value, Budget) and value.evals < 1:
        raise InputError("The per-iteration budget's evals must be at least 1 example-evaluation.")


ENTRY_FORM = "evals=N,tokens=N,usd=X"
# The limits of a run (``SearchBudget``), declared once (``metaharness.setting``).
BUDGET_SETTINGS = (
    Setting(
        "evals_per_iter",
        int,
        DEFAULT_EVALS_PER_ITER,
        "Full evaluations' worth of example-evaluations an iteration may spend (when --iter-budget caps no evals).",
        at_least(1),
        flag="--evals-per-iter",
        minimum=1,
    ),
    Setting(
        "per_iteration",
        Budget,
        Budget(),
        "What one iteration's task-model calls may spend: example-evaluations, tokens, dollars.",
        _iteration_budget,
        flag="--iter-budget",
        metavar=ENTRY_FORM,
        parse=lambda text: Budget.parse(text, option="--iter-budget"),
        shown_default="evals from --evals-per-iter",
        old_keys=("iteration_budget",),
    ),
    Setting(
        "per_run",
        Budget,
        Budget(),
        "What the whole run may spend: example-evaluations, tokens (every model's), dollars.",
        _a_budget,
        flag="--budget",
        metavar=ENTRY_FORM,
        parse=lambda text: Budget.parse(text, option="--budget"),
        shown_default="no cap",
        parts={
            "--max-cost": (
                "usd",
                parse_usd,
                "Stop cleanly once this many USD are spent (whole run, every model).",
                "USD",
            ),
            "--max-tokens": (
                "tokens",
                parse_tokens,
                "Stop cleanly once this many tokens (input + output) are spent (whole run).",
                "N",
            ),
        },
        old_keys=("run_budget",),
    ),
)
_DECLARED = by_name(BUDGET_SETTINGS)


@dataclass(frozen=True)
class SearchBudget:
    """Every limit of a run (the module docstring says what each counts; ``BUDGET_SETTINGS`` declares each), checked
    when made: ``evals_per_iter`` a whole number >= 1, ``per_iteration`` at least one example-evaluation where its
    ``evals`` are capped."""

    evals_per_iter: int = _DECLARED["evals_per_iter"].default
    per_iteration: Budget = _DECLARED["per_iteration"].default
    per_run: Budget = _DECLARED["per_run"].default

    def __post_init__(self) -> None:
        for f in fields(self):
            _DECLARED[f.name].check(getattr(self, f.name))

    def iteration_limit(self, share: int) -> Budget:
        """What one iteration may spend: ``per_iteration``, its ``evals`` ``evals_per_iter`` full evaluations of
        ``share`` validation examples when they are not capped."""
        if math.isfinite(self.per_iteration.evals):
            return self.per_iteration
        return replace(self.per_iteration, evals=float(self.evals_per_iter * share))

    def for_iteration(self, run_spent: Spend, iteration_spent: Spend, *, share: int) -> Budget:
        """What the rest of an iteration may spend: the smaller of the iteration's limit minus what the iteration
        spent, and the run's limit minus what the run spent."""
        return self.iteration_limit(share).left(iteration_spent).tightest(self.per_run.left(run_spent))
