"""Exit codes, and the exception for problems found before anything runs.

Every command ends with one of these codes; the README has the table.
"""
from __future__ import annotations

EXIT_OK = 0          # success: at least one example written
EXIT_FAILED = 1      # the runner or the job failed
EXIT_USAGE = 2       # usage or input error found before running; nothing was written
EXIT_ERROR_RATE = 3  # the error-rate policy (--max-error-rate, --strict) failed the run
EXIT_EMPTY = 4       # the run finished but wrote nothing (every image rejected)


def named_few(names, limit: int) -> str:
  """`a, b, c and 4 more`: the first `limit` names of a list a one-line message shows."""
  names = list(names)
  more = len(names) - limit
  return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


class UsageError(Exception):
  """A usage or input problem found before the pipeline runs (missing or unreadable input,
  wrong format for the file, ambiguous layout, a label map syntax error, a busy output...).

  Raised at pipeline-construction time, never inside a DoFn. The CLI prints the message as
  one line, without a traceback, and exits with EXIT_USAGE before the output is touched.
  """
