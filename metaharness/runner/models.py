"""Which models a new run uses when it does not name them (``default_models``).

With an API key in the environment the ``tps`` proposer drives the matching hosted model; without one, the
embedded task model and the ``offline`` proposer run with no network.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC

# Hosted proposer models used when the matching key is set and no proposer model is named.
HOSTED_PROPOSERS = (("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-5"), ("OPENAI_API_KEY", "openai:gpt-4.1"))
# The proposers that drive a coding agent with a proposer model.
MODEL_PROPOSERS = ("coding", "tps")


class Models(NamedTuple):
    """A run's models as ``default_models`` fills them in, with the line explaining the choice (or None)."""

    task_model: str
    proposer: str
    proposer_model: str | None
    notice: str | None


def default_models(task_model: str | None, proposer: str | None, proposer_model: str | None) -> Models:
    """Fill in what was not chosen (the module docstring says how); a new run's settings do it once
    (``metaharness.runner.settings.RunSettings.resolve``)."""
    notice = None
    if proposer_model is None and proposer in (None, *MODEL_PROPOSERS):
        proposer_model = next((spec for key, spec in HOSTED_PROPOSERS if os.environ.get(key)), None)
    if proposer is None:
        proposer = "tps" if proposer_model else "offline"
    if task_model is None:
        task_model = DEFAULT_TASK_MODEL_SPEC
        if proposer == "offline":
            has_key = any(os.environ.get(key) for key, _ in HOSTED_PROPOSERS)
            notice = (
                f"{'No hosted proposer selected' if has_key else 'No API key configured'}: using the embedded task "
                f"model {DEFAULT_TASK_MODEL_SPEC} and the offline proposer. "
                "For hosted models set ANTHROPIC_API_KEY or OPENAI_API_KEY, or pass --task-model openai:MODEL@URL "
                "--proposer tps --proposer-model anthropic:claude-sonnet-4-5."
            )
    return Models(task_model, proposer, proposer_model, notice)
