"""Harness code: two harness programs in one, and how their answers combine. Stdlib only (copied into harnesses by
``harness_code.definitions``).

Each parent's source is a string constant of the combined file, executed into a namespace of its own (their
module-level names never meet) and constructed on the same ``lm`` and ``train``, so every call either makes is
one its own evaluation made. ``_answer_or_error`` runs one parent on one input and keeps its error instead of
raising, so one parent's failure leaves the other's answer.
"""


def _load_harness(source, lm, train):
    """The ``Harness`` of ``source`` (a harness file's text) in a namespace of its own, constructed."""
    namespace: dict = {"__name__": "harness_parent"}
    exec(compile(source, "<parent harness>", "exec"), namespace)
    return namespace["Harness"](lm, train)


def _answer_or_error(harness, x):
    """(answer, None) from ``harness.predict(x)``, or (None, the error) when it raises or answers no text."""
    try:
        answer = harness.predict(x)
    except Exception as error:  # noqa: BLE001 - the other parent answers instead
        return None, error
    if not isinstance(answer, str) or not answer.strip():
        return None, ValueError("no answer")
    return answer, None
