"""Ctrl-C in `metaharness optimize`: only the main process sees it (children keep working), the first one asks the
loop to stop after the step under way, the second aborts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Runs in its own session so that signalling "the foreground group" reaches only this script and its children.
SCRIPT = textwrap.dedent(
    """
    import os, signal, subprocess, time
    from rich.console import Console
    from metaharness.search.loop import StopRequest
    from metaharness.cli.search import StopOnCtrlC

    # As started from a terminal: a job started in the background by a non-interactive shell (as CI may start
    # the tests) inherits SIGINT ignored, and then no Ctrl-C reaches it at all.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop = StopRequest()
    try:
        with StopOnCtrlC(stop, Console()):
            child = subprocess.Popen(["sleep", "30"])  # stands for a sandbox, a git helper, a model server
            os.killpg(os.getpgrp(), signal.SIGINT)  # what a terminal's Ctrl-C does
            for _ in range(100):
                if stop.requested:
                    break
                time.sleep(0.05)
            print("stop requested", stop.requested, "child alive", child.poll() is None, flush=True)
            os.killpg(os.getpgrp(), signal.SIGINT)
            # Short sleeps in a loop, like the optimiser's own work: the interpreter checks for the interrupt
            # between them (one long sleep would only see it after returning). Up to 30 s on a loaded machine.
            for _ in range(600):
                time.sleep(0.05)
            print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("aborted by the second Ctrl-C", flush=True)
        child.kill()
    print("handler restored", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
          "unblocked", signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, []), flush=True)
    """
)


def test_first_ctrl_c_requests_a_stop_and_spares_children_second_aborts():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, start_new_session=True
    )
    assert out.returncode == 0, out.stderr
    assert "stop requested True child alive True" in out.stdout
    assert "finishing the current step" in out.stdout
    assert "aborted by the second Ctrl-C" in out.stdout and "not interrupted" not in out.stdout
    assert "handler restored True unblocked True" in out.stdout
