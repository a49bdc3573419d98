"""The commands that only read an output: inspect, show, verify. They never import Apache Beam
(tests/test_layout.py runs them and checks). Given a versioned output's DEST (convert
--append) each reads the version DEST/LATEST names, resolved once, and says which; a damaged
LATEST is one line on stderr and exit 2."""
from __future__ import annotations

import sys

from beam_tfrecord.errors import UsageError
from beam_tfrecord.storage import versions


def run(args) -> int:
  """`inspect`, `show` or `verify`, as parsed; the exit code."""
  try:
    return _run(args)
  except versions.DamagedVersions as e:  # cli.main: one line, exit 2
    raise UsageError(str(e)) from None


def _run(args) -> int:
  from beam_tfrecord.readback import verify
  from beam_tfrecord.storage import files
  picture = ("--plot", args.plot) if args.command == "inspect" else (
      ("--output", args.picture) if args.command == "show" else None)
  problem = picture and files.not_a_file(f"{args.command} {picture[0]}", picture[1] or "")
  if problem:  # a FIFO there: opening it to write waits for a reader
    raise UsageError(problem)
  if args.command == "inspect":
    from beam_tfrecord.readback import stats
    return stats.inspect_command(args.output, as_json=args.json, plot_path=args.plot)
  if args.command == "show":
    return _show(args)
  return verify.run(args.output, repair=args.repair, break_lock=args.break_lock)


def _show(args) -> int:
  from beam_tfrecord.finalize.output import IncompleteOutput
  from beam_tfrecord.readback import show
  if args.n < 1:
    print("beam-tfrecord: -n must be at least 1", file=sys.stderr)
    return 2
  try:
    picture = show.show(args.output, split=args.split, n=args.n, seed=args.seed)
  except versions.DamagedVersions:
    raise
  except (KeyError, ValueError) as e:
    print(f"beam-tfrecord: {e.args[0] if e.args else e}", file=sys.stderr)
    return 2
  except IncompleteOutput as e:  # one line naming verify --repair, exit 2
    raise UsageError(str(e)) from None
  except OSError as e:  # no manifest.json: not a finished output
    print(f"beam-tfrecord: {args.output} has no readable manifest.json ({e}); is it a "
          "finished beam-tfrecord output?", file=sys.stderr)
    return 2
  picture.save(args.picture)
  number = picture.info.get("version")
  read = f" -> {versions.label(number)}" if number is not None else ""
  print(f"{args.picture}: {len(picture.info['tiles'])} examples of {args.output}{read}")
  return 0
