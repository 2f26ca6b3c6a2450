"""Allow ``python -m metaharness``."""

from metaharness.cli import main

main()
