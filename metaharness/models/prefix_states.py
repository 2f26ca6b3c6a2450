"""Prompt-prefix reuse for the embedded model: a llama.cpp context that keeps the key/value states of recent prompts.

On its own, llama-cpp-python reuses the key/value (KV) cache only for the prefix a prompt shares with the previous
call. The evaluator runs several examples at once through the one in-process model, and the offline proposer's
probes share it too, so consecutive calls often share nothing, although each shares a long prefix (the system
prompt, the shots) with a call made a moment before. `PrefixReusingLlama` keeps the KV states of recent prompts
(`PrefixStates`: least recently used out first, bounded in bytes) and starts every call from whichever holds the
longest prefix of the new prompt: the live context or a saved state, restored with `llama_state_seq_set_data`.

**The same answers with and without reuse, by construction.** llama.cpp's numbers depend on how a prompt is cut
into batches: a token evaluated in a batch of its own gets other logits and KV values than inside a larger batch
(measured on the embedded model: up to 0.7 apart in a logit). So every prompt is evaluated in the same chunks,
whatever was reused: chunks end at the multiples of `PREFIX_GRID` tokens, and a last chunk of one token joins the
chunk before it (`grid_chunks`). A call reuses a prefix only up to a chunk boundary of its own prompt
(`reusable_length`) that is also one of the prompt that left the state (`kept_length`); tokens a call generated are
never reused (they were decoded one at a time). A reused prefix was then computed in exactly the chunks a fresh
evaluation of the new prompt computes, from the same tokens, so its KV values, the logits and the answers are the
same bits as without reuse. What it costs: up to `PREFIX_GRID` shared tokens recomputed per call, and batches of
at most `2 * PREFIX_GRID` tokens instead of llama-cpp-python's 512.

How many threads evaluate a prompt and generate its answer is chosen before each call
(`metaharness.models.cpu_share`): with a thread per CPU on a machine that other processes keep busy, small batches
are much slower than large ones; with the threads that are free, the batch size costs little
(`benchmarks/prefix_reuse.py`, its `batches` table).
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import llama_cpp  # the optional extra `local`: this module is imported only when a local model is loaded
import numpy as np
import numpy.typing as npt

from metaharness.models.cpu_share import CpuShare

PREFIX_GRID = 64
# Saved states of the smollm2-135m model take 23 KB per token: 1 GiB holds about 45,000 prompt tokens
# (fourteen LawBench prompts of 3,100 tokens).
DEFAULT_STATE_BYTES = 1 << 30

Tokens = npt.NDArray[np.intc]


def grid_chunks(past: int, count: int, grid: int = PREFIX_GRID) -> list[tuple[int, int]]:
    """How `count` tokens that follow `past` evaluated ones are cut into batches: (start, stop) offsets into them.

    Chunks end at the multiples of `grid` (counted from the prompt's first token); a last chunk of a single token
    joins the chunk before it, so that no prompt token but a prompt's only one is evaluated alone.

    >>> grid_chunks(0, 129, grid=64)
    [(0, 64), (64, 129)]
    >>> grid_chunks(0, 130, grid=64)
    [(0, 64), (64, 128), (128, 130)]
    >>> grid_chunks(64, 3, grid=64)
    [(0, 3)]
    """
    cuts = [past, *range(past - past % grid + grid, past + count, grid), past + count]
    if len(cuts) > 2 and cuts[-1] - cuts[-2] == 1:
        del cuts[-2]
    return [(start - past, stop - past) for start, stop in zip(cuts, cuts[1:], strict=False)]


def reusable_length(prompt_length: int, grid: int = PREFIX_GRID) -> int:
    """The longest prefix of a prompt of `prompt_length` tokens that a call may take from a saved state: the last
    chunk boundary before its last token (that token is always evaluated: its logits give the first answer token).

    >>> [reusable_length(n, grid=64) for n in (1, 64, 65, 66, 129, 130)]
    [0, 0, 0, 64, 64, 128]
    """
    return grid * ((prompt_length - 2) // grid) if prompt_length >= 2 else 0


def kept_length(prompt_length: int, grid: int = PREFIX_GRID) -> int:
    """How much of an evaluated prompt of `prompt_length` tokens is worth keeping: its longest prefix that ends at
    a chunk boundary (a merged last chunk ends one token past a multiple of `grid`).

    >>> [kept_length(n, grid=64) for n in (63, 64, 65, 66, 129)]
    [0, 64, 0, 64, 64]
    """
    if prompt_length > 1 and prompt_length % grid == 1:
        return prompt_length - 1 - grid
    return grid * (prompt_length // grid)


def common_prefix(a: Tokens, b: Tokens) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


@dataclass
class SavedPrefix:
    """The KV state of one sequence (`llama_state_seq_get_data`'s bytes) and the tokens it holds."""

    tokens: Tokens
    state: ctypes.Array[ctypes.c_uint8]


class PrefixStates:
    """Saved prompt states of one llama.cpp context, least recently used evicted first, at most `capacity_bytes`.

    A state that a saved one already holds (its tokens are a prefix of the saved tokens) is not saved again, and
    saving a longer prompt replaces the states it extends.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._saved: OrderedDict[int, SavedPrefix] = OrderedDict()
        self._next = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._saved)

    def longest(self, tokens: Tokens) -> tuple[int, SavedPrefix | None]:
        """The saved state sharing the longest prefix with `tokens`, and that length (0, None when none shares)."""
        best, found, key = 0, None, None
        for index, saved in self._saved.items():
            shared = common_prefix(saved.tokens, tokens)
            if shared > best:
                best, found, key = shared, saved, index
        if key is not None:
            self._saved.move_to_end(key)
        return best, found

    def add(self, tokens: Tokens, save: Callable[[], ctypes.Array[ctypes.c_uint8]]) -> None:
        """Keep the state of `tokens` (`save` copies it out of the context; called only when it is kept)."""
        if not len(tokens):
            return
        for index, saved in list(self._saved.items()):
            shared = common_prefix(saved.tokens, tokens)
            if shared == len(tokens):  # already held
                self._saved.move_to_end(index)
                return
            if shared == len(saved.tokens):  # extended by the new prompt
                self._drop(index)
        state = save()
        if len(state) > self.capacity_bytes:
            return
        self._saved[self._next] = SavedPrefix(tokens.copy(), state)
        self._next += 1
        self.nbytes += len(state)
        while self.nbytes > self.capacity_bytes:
            self._drop(next(iter(self._saved)))

    def _drop(self, index: int) -> None:
        self.nbytes -= len(self._saved.pop(index).state)


class PrefixReusingLlama(llama_cpp.Llama):
    """A `llama_cpp.Llama` that starts each prompt from the longest prefix it holds (see the module docstring).

    Between `generate` (which llama-cpp-python calls once per completion, with the prompt's tokens) and the next
    call, the owner calls `remember` once the completion is done: it keeps the prompt's state and returns how many
    prompt tokens were reused. `reuse` False evaluates every prompt from its first token (the comparison baseline).
    Not thread-safe, like `Llama`: one call at a time.
    """

    def __init__(
        self, model_path: str, *, n_ctx: int, logits_all: bool, state_bytes: int = DEFAULT_STATE_BYTES
    ) -> None:
        batch = 2 * PREFIX_GRID  # the largest chunk grid_chunks makes is PREFIX_GRID + 1 tokens
        self.cpu_share = CpuShare()
        super().__init__(
            model_path=model_path,
            n_ctx=n_ctx,
            n_batch=batch,
            n_ubatch=batch,
            n_threads=self.cpu_share.half,
            n_threads_batch=self.cpu_share.half,
            logits_all=logits_all,
            verbose=False,
        )
        self.states = PrefixStates(state_bytes)
        self.reuse = True
        self._prompt: Tokens | None = None  # the prompt of the call in progress
        self._clean = 0  # leading tokens of the live context that a later prompt may reuse
        self._reused = 0

    def generate(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Generator[int, Sequence[int] | None, None]:
        prompt = np.asarray(tokens, dtype=np.intc)
        threads = self.cpu_share.prompt_threads()
        if threads != self.n_threads_batch or threads != self.n_threads:
            self._ctx.set_n_threads(threads, threads)
            self.n_threads = self.n_threads_batch = threads
        self._reused = self._start_from_longest_prefix(prompt) if self.reuse else 0
        self.n_tokens = self._reused  # Llama.generate keeps these tokens' KV and evaluates the rest of the prompt
        self._prompt, self._clean = prompt, 0
        return super().generate(tokens, *args, **kwargs)

    def eval(self, tokens: Sequence[int]) -> None:
        tokens = list(tokens)
        for start, stop in grid_chunks(self.n_tokens, len(tokens)):
            super().eval(tokens[start:stop])

    def remember(self) -> int:
        """After a completion: keep its prompt's reusable prefix (live, and saved when `reuse`); returns the number
        of prompt tokens the completion reused."""
        prompt, self._prompt = self._prompt, None
        if prompt is None:  # no prompt was evaluated
            return 0
        keep = kept_length(len(prompt))
        self._ctx.kv_cache_seq_rm(0, keep, -1)  # the generated tokens and a merged last chunk are never reused
        self.n_tokens = self._clean = keep
        if self.reuse:
            self.states.add(prompt[:keep], self._save_state)
        return self._reused

    def _start_from_longest_prefix(self, prompt: Tokens) -> int:
        limit = reusable_length(len(prompt))
        live = min(common_prefix(self.input_ids[: self._clean], prompt), limit)
        shared, saved = self.states.longest(prompt)
        shared = min(shared, limit)
        if saved is None or shared // PREFIX_GRID <= live // PREFIX_GRID:
            return live - live % PREFIX_GRID
        return shared - shared % PREFIX_GRID if self._restore(saved) else 0

    def _save_state(self) -> ctypes.Array[ctypes.c_uint8]:
        size = llama_cpp.llama_state_seq_get_size(self._ctx.ctx, 0)
        state = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx.ctx, state, size, 0)
        if written != size:
            raise RuntimeError(f"llama_state_seq_get_data wrote {written} bytes of {size}")
        return state

    def _restore(self, saved: SavedPrefix) -> bool:
        """Load a saved state into the context (False, and an empty context, if llama.cpp refuses it)."""
        self._clean = 0
        if not llama_cpp.llama_state_seq_set_data(self._ctx.ctx, saved.state, len(saved.state), 0):
            self._ctx.kv_cache_seq_rm(0, 0, -1)
            return False
        self.input_ids[: len(saved.tokens)] = saved.tokens
        return True
