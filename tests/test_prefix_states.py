"""The chunking that keeps reused prefixes exact, and the store of saved prompt states (no model needed)."""

from __future__ import annotations

import ctypes

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from metaharness.models.prefix_states import (
    PrefixStates,
    common_prefix,
    grid_chunks,
    kept_length,
    reusable_length,
)

GRID = 64


def boundaries(past: int, count: int) -> list[int]:
    """Absolute positions where the batches evaluating `count` tokens after `past` end."""
    return [past + stop for _, stop in grid_chunks(past, count, grid=GRID)]


@given(st.integers(0, 40).map(lambda k: k * GRID), st.integers(1, 700))
def test_chunks_cover_the_tokens_end_on_the_grid_and_never_leave_one_token_alone(past, count):
    chunks = grid_chunks(past, count, grid=GRID)
    assert chunks[0][0] == 0 and chunks[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False))
    assert all((past + stop) % GRID == 0 for _, stop in chunks[:-1])
    assert all(stop - start <= GRID + 1 for start, stop in chunks)
    if len(chunks) > 1:
        assert chunks[-1][1] - chunks[-1][0] > 1


@given(st.integers(1, 600), st.integers(1, 600), st.integers(0, 600))
def test_a_reused_prefix_was_computed_in_the_chunks_a_fresh_evaluation_uses(first, second, shared):
    """A prefix left by a prompt of `first` tokens and reused by one of `second` tokens (sharing `shared`) ends on a
    batch boundary of both fresh evaluations, and what follows it is cut as the fresh evaluation cuts it."""
    shared = min(shared, first, second)
    reuse = min(shared, reusable_length(second, grid=GRID), kept_length(first, grid=GRID))
    reuse -= reuse % GRID
    fresh_second = boundaries(0, second)
    if reuse:
        assert reuse in boundaries(0, first) and reuse in fresh_second
    assert [b for b in fresh_second if b > reuse] == boundaries(reuse, second - reuse)
    assert reuse < second  # the last prompt token is always evaluated


def test_lengths_on_a_small_grid():
    assert [reusable_length(n, grid=4) for n in range(1, 11)] == [0, 0, 0, 0, 0, 4, 4, 4, 4, 8]
    assert [kept_length(n, grid=4) for n in range(1, 11)] == [0, 0, 0, 4, 0, 4, 4, 8, 4, 8]


def tokens(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.intc)


def state(nbytes: int) -> ctypes.Array[ctypes.c_uint8]:
    return (ctypes.c_uint8 * nbytes)()


def test_common_prefix():
    assert common_prefix(tokens(1, 2, 3), tokens(1, 2, 4, 5)) == 2
    assert common_prefix(tokens(1, 2), tokens(1, 2, 3)) == 2
    assert common_prefix(tokens(), tokens(1)) == 0


def test_the_longest_shared_prefix_wins():
    store = PrefixStates(capacity_bytes=1000)
    store.add(tokens(1, 2, 3, 4), lambda: state(10))
    store.add(tokens(1, 2, 9, 9, 9, 9), lambda: state(10))
    shared, saved = store.longest(tokens(1, 2, 3, 7))
    assert shared == 3 and saved is not None and list(saved.tokens) == [1, 2, 3, 4]
    assert store.longest(tokens(5, 6)) == (0, None)


def test_held_prefixes_are_not_saved_twice_and_extended_ones_are_replaced():
    store = PrefixStates(capacity_bytes=1000)
    saves = []

    def save():
        saves.append(1)
        return state(10)

    store.add(tokens(1, 2, 3, 4), save)
    store.add(tokens(1, 2), save)  # already held by (1, 2, 3, 4): not copied out of the context again
    assert len(store) == 1 and len(saves) == 1
    store.add(tokens(1, 2, 3, 4, 5, 6), save)  # extends (1, 2, 3, 4), which goes
    assert len(store) == 1 and store.nbytes == 10
    shared, saved = store.longest(tokens(1, 2, 3, 4, 5, 6))
    assert shared == 6 and saved is not None and list(saved.tokens) == [1, 2, 3, 4, 5, 6]


def test_the_least_recently_used_state_goes_first_when_the_bytes_run_out():
    store = PrefixStates(capacity_bytes=25)
    store.add(tokens(1), lambda: state(10))
    store.add(tokens(2), lambda: state(10))
    store.longest(tokens(1, 0))  # (1,) was used last
    store.add(tokens(3), lambda: state(10))
    assert store.nbytes == 20
    assert store.longest(tokens(2))[1] is None
    assert store.longest(tokens(1))[0] == 1 and store.longest(tokens(3))[0] == 1
    store.add(tokens(4), lambda: state(30))  # larger than the whole store: not kept
    assert store.longest(tokens(4))[1] is None and store.nbytes == 20
