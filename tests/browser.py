"""A page opened in headless Chromium, for the tests that check a written HTML page renders without errors."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or next(
    (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None
)


def assert_renders_cleanly(page: Path, home: Path) -> None:
    """``page`` in headless Chromium (its profile and HOME under ``home``): the browser exits 0, the page's inline
    script ran to its end (it marks the document ``data-rendered="yes"``), and nothing was logged to the console or
    failed to load."""
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={home / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=3000",
        "--dump-dom",
        page.as_uri(),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(home)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'data-rendered="yes"' in out.stdout
    assert [line for line in out.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line] == []
    assert "Failed to load resource" not in out.stderr
