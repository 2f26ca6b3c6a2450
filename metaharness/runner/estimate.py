"""What a run will cost before it spends anything: ``metaharness optimize --dry-run``.

The estimate comes from the run's settings (seeds, iterations, budgets, validation examples and the held-out ones,
the test bound, the proposer), its data (how many examples each split has) and rates measured now:

- what the seeds send: each seed harness runs in the sandbox on ``SAMPLE`` validation examples against a stand-in
  model that answers at once and costs nothing (``metaharness.models.stand_in``); its requests give the model calls
  per example, the prompt tokens per example (at ``CHARS_PER_TOKEN`` characters a token) and the answer tokens per
  example at most (the ``max_tokens`` asked);
- how fast the task model answers, for a model that costs nothing to call (the embedded model, a self-hosted
  server): the seeds' requests on one sample example are sent to warm the model's prompt states (as a run's earlier
  examples do), those of the next are timed, and the model's own token counts there replace the character count
  (scaled) and the answers' ``max_tokens``; a priced hosted model is not called, and its minutes are not estimated;
- dollars from the price table (``metaharness.models.prices``; local and self-hosted models cost $0).

The parts (``Estimate.parts``), each with the bound it is:

- the seeds: every seed on every search example (the count is exact; the tokens are the sample's mean);
- the iterations: each may spend its whole budget (``--evals-per-iter`` full evaluations' worth of examples, or
  ``--iter-budget``), at the seeds' mean tokens per example-evaluation: an upper bound, since the default policy
  stops early on losers and a revision scored by replaying recorded calls, or found not to depend on the model,
  costs nothing;
- judging on the held-out examples: the best on them, at most once per iteration (a new best);
- the test split: the best on the examples the test bound allows (``metaharness.search.test_split``); each other
  member of the Pareto front adds as much again (its size is known only at the end);
- the proposer model: none for the offline proposer; ``PROPOSER_INPUT_TOKENS`` and ``PROPOSER_OUTPUT_TOKENS`` per
  iteration for a coding-agent proposer (an order of magnitude: files read, traces, several turns).

The run's own caps (``--max-cost``, ``--max-tokens``, ``--budget``) bound what it really spends; the estimate says
whether they would stop it. Nothing is written and the run directory is not touched.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metaharness.evaluation.evaluator import evaluate
from metaharness.models import connect
from metaharness.models.client import Client
from metaharness.models.ledger import Ledger
from metaharness.models.prices import PriceTable
from metaharness.models.protocol import ChatRequest, ChatResult, ModelClient, Role, Usage, context_window
from metaharness.models.stand_in import StandInClient
from metaharness.runner.optimize import stored_settings
from metaharness.runner.settings import RunSettings, SettingsChange
from metaharness.runner.task import run_task, seeds_of, task_source
from metaharness.search.held_out import CONTENDERS
from metaharness.search.loop import Seed
from metaharness.search.staging import ExampleOrder
from metaharness.search.test_split import TestSplit
from metaharness.search.withheld import withhold
from metaharness.store.run_dir import RunDirectory
from metaharness.tasks.protocol import Task

# Validation examples each seed runs on against the stand-in (the first ones of the split).
SAMPLE = 3
# Characters per token where the task model's tokenizer is not at hand (English text; Chinese is nearer 1).
CHARS_PER_TOKEN = 4.0
# Tokens a chat template adds around each message.
MESSAGE_TOKENS = 4
# One iteration of a coding-agent proposer: files read, traces, several turns (an order of magnitude).
PROPOSER_INPUT_TOKENS = 300_000
PROPOSER_OUTPUT_TOKENS = 20_000


@dataclass(frozen=True)
class SeedRate:
    """What one seed sends per validation example (the mean over its sample): model calls, prompt tokens and answer
    tokens at most; ``seconds`` per example on the task model, timed (``None``: not timed)."""

    name: str
    calls: float
    input_tokens: float
    output_tokens: float
    seconds: float | None = None


@dataclass(frozen=True)
class Part:
    """One line of the estimate: ``evals`` example-evaluations, the model ``calls`` (NaN: not counted),
    ``input_tokens`` and ``output_tokens``, ``usd`` (``None``: the model has no price) and ``seconds`` (``None``: not
    estimated); ``bound`` says what kind of number it is."""

    what: str
    evals: float
    calls: float
    input_tokens: float
    output_tokens: float
    usd: float | None
    seconds: float | None
    bound: str


@dataclass
class Estimate:
    """The parts of a run's cost, the seeds' measured rates, and notes (caps that would stop it, what is assumed)."""

    parts: list[Part]
    rates: list[SeedRate]
    notes: list[str] = field(default_factory=list)

    def total(self) -> Part:
        """The parts added up (dollars and seconds unknown when any part's are; calls not counted are left out)."""
        usd = [p.usd for p in self.parts]
        seconds = [p.seconds for p in self.parts]
        return Part(
            "whole run",
            sum(p.evals for p in self.parts),
            sum(p.calls for p in self.parts if not math.isnan(p.calls)),
            sum(p.input_tokens for p in self.parts),
            sum(p.output_tokens for p in self.parts),
            None if None in usd else sum(u for u in usd if u is not None),
            None if None in seconds else sum(s for s in seconds if s is not None),
            "",
        )

    def rows(self) -> list[list[str]]:
        """The parts and the total as table rows: what, example-evaluations, calls, tokens in, tokens out, USD,
        minutes, bound."""
        return [_row(part) for part in [*self.parts, self.total()]]


HEADERS = ["part", "examples", "calls", "tokens in", "tokens out", "USD", "minutes", "bound"]


def _row(part: Part) -> list[str]:
    return [
        part.what,
        f"{part.evals:,.0f}",
        "" if math.isnan(part.calls) else f"{part.calls:,.0f}",
        f"{part.input_tokens:,.0f}",
        f"{part.output_tokens:,.0f}",
        "unknown" if part.usd is None else f"${part.usd:,.4f}",
        "not estimated" if part.seconds is None else f"{part.seconds / 60:,.1f}",
        part.bound,
    ]


class _Recorder:
    """A stand-in task model that keeps every request it answers (a ``ModelClient``)."""

    def __init__(self, stand_in: StandInClient, window: int | None) -> None:
        self.stand_in = stand_in
        self.spec = stand_in.spec
        if window:
            self.context_window = window
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        self.requests.append(request)
        return self.stand_in.complete(request, role=role)


def seed_rates(
    task: Task,
    seeds: Sequence[Seed],
    task_model: str,
    *,
    sample: int = SAMPLE,
    timed: bool = True,
) -> list[SeedRate]:
    """Each seed's ``SeedRate``, from its requests on the first ``sample`` validation examples (the module
    docstring); timed on the task model when ``timed`` and the model costs nothing to call."""
    real = connect(task_model, cache=False, ledger=Ledger())
    window = context_window(real)
    ids = [example.id for example in task.load("val")][:sample]
    answers = [example.target for example in task.load("train")]
    price = PriceTable().lookup(task_model)
    time_it = timed and price is not None and price.input == 0 and price.output == 0 and len(ids) >= 2
    rates = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds:
            harness = Path(scratch) / seed.name / "harness.py"
            harness.parent.mkdir()
            harness.write_text(seed.source, encoding="utf-8")
            sent = []
            for example in ids:
                recorder = _Recorder(StandInClient(answers, salt=0, context_window=window), window)
                evaluate(harness, task, "val", model=recorder, ids=[example], workers=1)
                sent.append(recorder.requests)
            counted = [sum(_counted_tokens(r) for r in requests) for requests in sent]
            rate = SeedRate(
                seed.name,
                calls=sum(len(r) for r in sent) / len(ids),
                input_tokens=sum(counted) / len(ids),
                output_tokens=sum(r.max_tokens * r.n for requests in sent for r in requests) / len(ids),
            )
            rates.append(_timed(rate, real, sent, counted) if time_it else rate)
    return rates


def _counted_tokens(request: ChatRequest) -> float:
    """A request's prompt tokens at ``CHARS_PER_TOKEN`` characters a token, ``MESSAGE_TOKENS`` a message more."""
    chars = sum(len(str(message.get("content") or "")) for message in request.messages)
    return chars / CHARS_PER_TOKEN + MESSAGE_TOKENS * len(request.messages)


def _timed(rate: SeedRate, model: Client, sent: list[list[ChatRequest]], counted: list[float]) -> SeedRate:
    """``rate`` measured on ``model``: the requests of the first example warm it (as a run's earlier examples do),
    those of the second are timed, and the model's own token counts there set the prompt tokens (the counted ones
    scaled by the model's count over the counted) and the answer tokens."""
    for request in sent[0]:
        _ask(model, request)
    before = model.ledger.totals()
    started = time.perf_counter()
    for request in sent[1]:
        _ask(model, request)
    seconds = time.perf_counter() - started
    after = model.ledger.totals()
    prompt = after["input_tokens"] - before["input_tokens"]
    scale = prompt / counted[1] if counted[1] and prompt else 1.0
    answers = float(after["output_tokens"] - before["output_tokens"])
    return SeedRate(rate.name, rate.calls, rate.input_tokens * scale, answers, seconds)


def _ask(model: ModelClient, request: ChatRequest) -> None:
    # A request the model refuses still took its time, and the harness would go on.
    with contextlib.suppress(Exception):
        model.complete(request)


def estimate_run(
    settings: RunSettings,
    task: Task,
    seeds: Sequence[Seed],
    *,
    iterations: int,
    done: set[int] | None = None,
    test: bool | TestSplit = True,
    rates: list[SeedRate] | None = None,
    timed: bool = True,
) -> Estimate:
    """What the run of ``settings`` on ``task`` will cost from now to ``iterations`` (the module docstring);
    ``done`` are the iterations a run directory has finished (0: its seeds), ``rates`` the seeds' (measured here
    when not given)."""
    done = done or set()
    rates = rates if rates is not None else seed_rates(task, seeds, settings.task_model, timed=timed)
    prices = PriceTable()
    task_price = prices.lookup(settings.task_model)
    order = _examples(settings, task)
    share, holdout = len(order.search), len(order.holdout) + len(order.judge_only)
    mean = _mean(rates)
    parts: list[Part] = []

    def part(what: str, evals: float, bound: str, rate: SeedRate = mean) -> Part:
        usage = Usage(int(evals * rate.input_tokens), int(evals * rate.output_tokens))
        return Part(
            what,
            evals,
            evals * rate.calls,
            usage.input_tokens,
            usage.output_tokens,
            None if task_price is None else task_price.dollars(usage),
            None if rate.seconds is None else evals * rate.seconds,
            bound,
        )

    if 0 not in done:
        for rate in rates:
            parts.append(part(f"seed {rate.name}", share, "exact count", rate))
    todo = [i for i in range(1, iterations + 1) if i not in done]
    budget = settings.search.budget.iteration_limit(share).evals
    if todo and math.isfinite(budget):
        span = f"iteration {todo[0]}" if len(todo) == 1 else f"iterations {todo[0]}-{todo[-1]}"
        parts.append(part(span, budget * len(todo), f"at most ({budget:g} an iteration)"))
    if holdout:
        held = CONTENDERS * len(order.confirm) + 2 * len(order.judge)
        parts.append(part("held-out examples", held, f"at most ({CONTENDERS} contenders, the returned and best seed)"))
    plan = TestSplit.of(test)
    test_size = _split_size(task, "test")
    if plan is not None and test_size:
        n = plan.examples(share, test_size)
        parts.append(part("test split", n, f"the best on {n} of {test_size}; each front member as much"))
    proposer = _proposer_part(settings, len(todo), prices)
    if proposer is not None:
        parts.append(proposer)
    notes = _notes(settings, share, order, plan, test_size, mean)
    estimate = Estimate(parts, rates, notes)
    estimate.notes += _cap_notes(settings, estimate.total())
    return estimate


def _examples(settings: RunSettings, task: Task) -> ExampleOrder:
    """The run's validation examples as the loop orders them: the search's share, the held-out ones and the
    training examples withheld to judge on."""
    task, judge_only = withhold(task, settings.search.judge_train)
    val = [example.id for example in task.load("val")]
    search = settings.search
    return ExampleOrder.split(
        val, seed=search.seed, limit=settings.val_limit, holdout=search.holdout, judge_only=judge_only
    )


def _mean(rates: list[SeedRate]) -> SeedRate:
    """The seeds' mean rate: what a revision of one of them is assumed to send."""
    n = max(1, len(rates))
    seconds = [r.seconds for r in rates]
    return SeedRate(
        "seed mean",
        sum(r.calls for r in rates) / n,
        sum(r.input_tokens for r in rates) / n,
        sum(r.output_tokens for r in rates) / n,
        None if None in seconds or not rates else sum(s for s in seconds if s is not None) / n,
    )


def _split_size(task: Task, split: str) -> int:
    """How many examples ``split`` has here (0 when it cannot be loaded: a data folder without it, no network)."""
    try:
        return len(task.load(split))
    except Exception:  # noqa: BLE001 - a split that cannot be loaded is not scored: the run notes it and goes on
        return 0


def _proposer_part(settings: RunSettings, iterations: int, prices: PriceTable) -> Part | None:
    """The proposer model's calls, for a proposer that has one."""
    if settings.proposer_model is None or iterations == 0:
        return None
    usage = Usage(PROPOSER_INPUT_TOKENS * iterations, PROPOSER_OUTPUT_TOKENS * iterations)
    price = prices.lookup(settings.proposer_model)
    return Part(
        "proposer model",
        0,
        math.nan,
        usage.input_tokens,
        usage.output_tokens,
        None if price is None else price.dollars(usage),
        None,
        "an order of magnitude",
    )


def _notes(
    settings: RunSettings, share: int, order: ExampleOrder, plan: TestSplit | None, test_size: int, mean: SeedRate
) -> list[str]:
    notes = [
        f"the search scores candidates on {share} validation examples"
        + (
            f", {len(order.holdout)} held out (a fifth choose among the search's best, the rest judge it)"
            if order.holdout
            else ""
        )
        + (f", {len(order.judge_only)} training examples withheld to judge on" if order.judge_only else "")
        + f"; a seed sends {mean.calls:.1f} calls and {mean.input_tokens:,.0f} prompt tokens per example on average",
    ]
    if plan is None:
        notes.append("the test split is not scored (--no-test)")
    elif not test_size:
        notes.append("the test split is not at hand (a data folder without it, or no network): it will be skipped")
    else:
        notes.append(f"the test split: {plan.describe()}")
    if mean.seconds is None:
        notes.append("minutes: not estimated (a priced model is not called before the run)")
    if settings.proposer_model is None:
        notes.append(f"the {settings.proposer} proposer calls no proposer model")
    else:
        notes.append(
            f"the proposer model {settings.proposer_model}: {PROPOSER_INPUT_TOKENS:,} tokens in and "
            f"{PROPOSER_OUTPUT_TOKENS:,} out an iteration, an order of magnitude; its minutes are not estimated"
        )
    return notes


def _cap_notes(settings: RunSettings, total: Part) -> list[str]:
    """What the run's caps would do to the estimated total."""
    caps = settings.search.budget.per_run
    notes = []
    tokens = total.input_tokens + total.output_tokens
    if math.isfinite(caps.tokens):
        notes.append(f"--max-tokens {caps.tokens:,.0f} {'stops' if tokens > caps.tokens else 'allows'} it")
    if math.isfinite(caps.usd) and total.usd is not None:
        notes.append(f"--max-cost ${caps.usd:g} {'stops' if total.usd > caps.usd else 'allows'} it")
    return notes


def dry_run(
    run_dir: str | Path,
    change: SettingsChange,
    *,
    iterations: int,
    task: Task | None = None,
    data_dir: str | Path | None = None,
    test: bool | TestSplit = True,
) -> tuple[RunSettings, Estimate]:
    """What ``optimize(run_dir, change, iterations=..., task=..., test=...)`` would run and its ``Estimate``, with
    the settings resolved as the run would resolve them (over what ``run_dir`` holds, which is not touched)."""
    stored = stored_settings(run_dir)
    if task is not None:
        change = SettingsChange(dataset=task.name, task_source=task_source(task)).over(change)
    resolved = RunSettings.resolve(change, stored)
    task = task or run_task(resolved.dataset, resolved.task_source, data_dir)
    done = RunDirectory.browse(Path(run_dir)).completed_iterations() if stored is not None else set()
    names = list(resolved.seed_names) if resolved.seed_names else None
    seeds = seeds_of(task, names, files=resolved.seed_files) if 0 not in done else []
    sampled = seeds or seeds_of(task, names, files=resolved.seed_files)  # a resumed run's rates: its seeds'
    rates = seed_rates(task, sampled, resolved.task_model)
    estimate = estimate_run(resolved, task, seeds, iterations=iterations, done=done, test=test, rates=rates)
    return resolved, estimate
