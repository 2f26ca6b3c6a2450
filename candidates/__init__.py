"""Seed harness programs, one folder per task; the first nodes of every search (installed as ``metaharness.candidates``).

The files are harness programs (DESIGN.md's harness contract) that run in the sandbox by path, never imported here.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
