"""`beam-tfrecord convert | demo | inspect | show | verify`: main() parses the command line
(cli/options.py) and runs the command.

  options.py         the parser: every option and its help (docs/options.md is made from it)
  beam_options.py    Beam's pipeline options passed through, checked
  convert_config.py  the ConvertConfig of convert's options
  convert.py         convert's run: checks, lock, pipeline, waiting for the job
  outcome.py         the summary, the outcome's line and the exit code of a finished run
  process.py         one BLAS thread, private temporary folders, SIGTERM, gc around a run
  demo.py            the demo
  read_only.py       inspect, show, verify (never import Beam)
  library_logs.py    what TensorFlow, absl and Beam may print (nothing, unless asked)

Options this tool does not know are handed to Beam as pipeline options (--runner,
--direct_num_workers, --direct_running_mode, --project, --region, ...).
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Optional, Sequence

from beam_tfrecord.cli import convert_config, demo, library_logs, process, read_only
from beam_tfrecord.cli.beam_options import check_beam_args, check_runner
from beam_tfrecord.cli.convert import run_convert
from beam_tfrecord.cli.demo import DEMO_MARKER, claim_demo_folder
from beam_tfrecord.cli.options import (EPILOG, RUN_OPTIONS, convert_options,
                                       make_parser)
from beam_tfrecord.errors import EXIT_FAILED, EXIT_USAGE, UsageError
from beam_tfrecord.storage import files

# what scripts/, deploy/ and the tests use
__all__ = ["main", "console", "make_parser", "convert_options", "EPILOG", "RUN_OPTIONS",
           "check_beam_args", "check_runner", "run_convert", "claim_demo_folder", "DEMO_MARKER",
           "UsageError"]


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The console script. Every usage or input error is one line on stderr and exit 2."""
  try:
    return _main(argv)
  except UsageError as e:
    print(f"beam-tfrecord: error: {e}", file=sys.stderr)
    return EXIT_USAGE
  except KeyboardInterrupt:
    print("beam-tfrecord: interrupted; the earlier output is unchanged", file=sys.stderr)
    return 130
  except OSError as e:  # a read-only or full disk where a command writes: one line, exit 1
    where = f"{e.filename}: " if e.filename else ""
    print(f"beam-tfrecord: error: {where}{e.strerror or e}", file=sys.stderr)
    return EXIT_FAILED


def _main(argv: Optional[Sequence[str]]) -> int:
  process.one_blas_thread()  # before numpy is imported
  argv = list(sys.argv[1:] if argv is None else argv)
  files.forget_listings()  # one command, one run: object-store listings are cached for it
  parser = make_parser()
  args, beam_args = parser.parse_known_args(argv)
  if any("gs://" in a for a in argv):
    from beam_tfrecord.storage import gcs
    gcs.check_credentials()  # one line, at once, when there are none (not Beam's 30 s)
  if args.command not in ("convert", "demo") and beam_args:
    parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
  check_beam_args(beam_args)
  library_logs.configure(args.command)  # before TensorFlow is imported or Beam runs
  if args.command == "convert":
    config = convert_config.build(args)
    return run_convert(config, beam_args, argv, break_lock=args.break_lock)
  if args.command == "demo":
    return demo.run(args, beam_args)
  return read_only.run(args)


def console() -> None:
  """The `beam-tfrecord` command: main(), then exit without tearing the interpreter down.
  Freeing Beam's modules and the run's objects one by one took 0.65 s after a run of 20,000
  images had written and reported everything; streams and logging are flushed first, and no
  thread or child process of a finished command is still working."""
  code = main()
  if not isinstance(code, int):  # None or a message: as sys.exit treats them
    sys.exit(code)
  logging.shutdown()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):  # a closed pipe: nothing more to say there
      pass
  os._exit(code)
