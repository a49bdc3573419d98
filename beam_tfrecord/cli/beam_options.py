"""Beam's pipeline options on the command line: what neither this tool nor Beam knows, and a
--runner Beam does not know, are usage errors with a 'did you mean' (Beam is imported only when
there are such options to look up)."""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

from beam_tfrecord.cli.options import convert_options
from beam_tfrecord.errors import UsageError


def _beam_parser() -> argparse.ArgumentParser:
  """A parser that knows every Beam pipeline option (as PipelineOptions collects them)."""
  from apache_beam.options.pipeline_options import (PipelineOptions,
                                                    _BeamArgumentParser)
  parser = _BeamArgumentParser(allow_abbrev=False)
  seen, todo = set(), list(PipelineOptions.__subclasses__())
  while todo:
    cls = todo.pop()
    if cls in seen:
      continue
    seen.add(cls)
    todo.extend(cls.__subclasses__())
    try:
      cls._add_argparse_args(parser)
    except argparse.ArgumentError:
      pass  # an option two classes declare
  return parser


def check_beam_args(beam_args: Sequence[str]) -> None:
  """Options that neither this tool nor Beam knows are errors, with a 'did you mean'."""
  import difflib
  if not beam_args:
    return  # nothing to look up: --help and the read-only commands never import Beam
  try:
    known, unknown = _beam_parser().parse_known_args(list(beam_args))
  except SystemExit:
    raise UsageError(f"bad Beam pipeline option in {' '.join(beam_args)}") from None
  check_runner(getattr(known, "runner", None))
  flags = [a.split("=", 1)[0] for a in unknown if a.startswith("-")]
  if not flags and unknown:
    raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
  if not flags:
    return
  ours = sorted({o for a in convert_options() for o in a.option_strings if o.startswith("--")})
  flag = flags[0]
  close = difflib.get_close_matches(flag.replace("_", "-").lower(), ours, n=1, cutoff=0.6)
  hint = f"; did you mean {close[0]}?" if close else "; see `beam-tfrecord convert --help`"
  raise UsageError(f"unknown option {flag} (neither beam-tfrecord nor Apache Beam knows it)"
                   + hint)


def check_runner(name: Optional[str]) -> None:
  """A --runner Beam does not know is one line with a 'did you mean', before anything is
  written (Beam's Pipeline() raises a ValueError for it). Beam matches names ignoring case,
  with or without the 'Runner' suffix; dotted class names are left to Beam."""
  if not name or "." in name:
    return
  import difflib

  from apache_beam.options.pipeline_options import StandardOptions
  known = {path.rsplit(".", 1)[-1].lower(): path.rsplit(".", 1)[-1]
           for path in StandardOptions.ALL_KNOWN_RUNNERS}
  if name.lower() in known or name.lower() + "runner" in known:
    return
  # 0.8: a typo (DirectRuner), not any name ending in 'runner' (NoSuchRunner ~ SparkRunner)
  close = difflib.get_close_matches(name.lower(), list(known), n=1, cutoff=0.8)
  hint = (f"did you mean {known[close[0]]}?" if close else
          f"Beam knows {', '.join(sorted(known.values()))}")
  raise UsageError(f"unknown --runner {name}: {hint}")

