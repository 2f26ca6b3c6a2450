"""How much of a harness's output is kept: the caps, and the marker where a text was cut (stdlib only).

A harness is untrusted and may answer with gigabytes. The worker cuts its prediction and error text before it
sends them; the parent cuts them again (a harness can write to the protocol pipe itself), reads the pipe with a
bounded buffer, kills a sandbox whose message passes ``MAX_MESSAGE_BYTES``, and keeps at most
``MAX_CALL_TEXT_CHARS`` of the messages of each model call in the trace, ``MAX_EXAMPLE_TRACE_CHARS`` for all the
calls of one example. So a record stays small whatever the harness does: at most the prediction, the error and
``max_calls`` calls of bounded size. The request caps (``MAX_PROMPT_CHARS`` and the rest) bound what one model
call may ask of the parent.
"""

from __future__ import annotations

MAX_PREDICTION_CHARS = 100_000
MAX_ERROR_CHARS = 20_000
MAX_CALL_TEXT_CHARS = 200_000
# What the messages of all the calls of one example may keep in its trace together.
MAX_EXAMPLE_TRACE_CHARS = 1_000_000
MAX_MESSAGE_BYTES = 16 << 20

# What one model request may hold; past these the proxy refuses it before it costs anything (``.proxy``).
MAX_PROMPT_CHARS = 2_000_000
# A token holds at most this many characters in practice: a prompt longer than this times the model's context
# window cannot fit in it, and is refused without being tokenised.
MAX_CHARS_PER_TOKEN = 16
MAX_MESSAGES = 256
MAX_SCHEMA_CHARS = 32_000
MAX_SCHEMA_DEPTH = 32
MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 200
# Room for the marker: the parent cuts at a cap plus this, so a text the worker already cut passes unchanged.
MARKER_CHARS = 100


def cut(text: str, limit: int) -> str:
    """``text`` when it holds at most ``limit`` characters, else its first ``limit`` and a marker saying so.

    >>> cut("abcdef", 3)
    'abc\\n[cut by metaharness: 6 characters, the first 3 kept]'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[cut by metaharness: {len(text):,} characters, the first {limit:,} kept]"
