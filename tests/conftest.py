"""Shared fixtures: where the paper's data lives for tests, and the repository root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# ../shared/data/meta-harness beside the checkout holds the paper's train/val splits (never copied into the repo).
SHARED_DATA = Path(os.environ.get("METAHARNESS_TEST_DATA", REPO_ROOT.parent / "shared" / "data" / "meta-harness"))


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED_DATA}")
    return SHARED_DATA
