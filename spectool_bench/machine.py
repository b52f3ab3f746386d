"""The machine a benchmark ran on, in words, for its results file: the description the
token tier's results files use (``token_spec.report.describe_machine``)."""

from __future__ import annotations

from token_spec.report import describe_machine as describe

__all__ = ["describe"]
