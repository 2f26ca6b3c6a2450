"""Shared fixtures: where the paper's data lives for tests, and the repository root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Helper modules of the tests: their asserts report values like the tests' own.
pytest.register_assert_rewrite("command_line", "fakes")

REPO_ROOT = Path(__file__).resolve().parents[1]
# The paper's train/val splits are read from a folder beside the checkout (never copied into the repository);
# METAHARNESS_TEST_DATA points elsewhere.
SHARED_DATA = Path(os.environ.get("METAHARNESS_TEST_DATA", REPO_ROOT.parent / "shared" / "data" / "meta-harness"))


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def local_openai_server():
    """Base URL ("http://127.0.0.1:PORT/v1") of a real OpenAI-compatible server (llama-cpp-python's) running the
    embedded model, started once per test session and stopped at its end."""
    from metaharness.models.llama_server import LlamaServer
    from metaharness.models.local import DEFAULT_LOCAL_MODEL, gguf_path

    server = LlamaServer(gguf_path(DEFAULT_LOCAL_MODEL), alias=DEFAULT_LOCAL_MODEL)
    try:
        server.wait_ready()
        yield server.base_url
    finally:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def _response_cache_in_tmp(tmp_path_factory):
    """Model clients made by tests cache responses in a per-session folder, never in the user's ~/.cache."""
    previous = os.environ.get("METAHARNESS_CACHE_DIR")
    os.environ["METAHARNESS_CACHE_DIR"] = str(tmp_path_factory.mktemp("response-cache"))
    yield
    if previous is None:
        os.environ.pop("METAHARNESS_CACHE_DIR", None)
    else:
        os.environ["METAHARNESS_CACHE_DIR"] = previous
