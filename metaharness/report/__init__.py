"""What a run says about itself: ``SUMMARY.md`` (``.summary``) and a self-contained HTML page (``.page``).

Both read a ``RunView`` (``.view``); the page's charts are inline SVG (``.svg``).
"""

from metaharness.report.page import write_report
from metaharness.report.summary import write_summary_markdown
from metaharness.report.view import RunView

__all__ = ["RunView", "write_report", "write_summary_markdown"]
