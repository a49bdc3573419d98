"""`beam-tfrecord convert`'s run: check, lock, build and run the pipeline, wait for the job
(Dataflow's job id, templates, --no_wait_until_finish); its summary and exit code come from
cli/outcome.py."""
from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from typing import Sequence

from beam_tfrecord import config as config_mod
from beam_tfrecord.cli import outcome
from beam_tfrecord.cli.process import (build_pipeline, pipeline_options,
                                       private_tempdir, run_to_end,
                                       terminate_as_exit, wait_for_job)
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import EXIT_FAILED, EXIT_OK, UsageError
from beam_tfrecord.storage import paths


def run_convert(config: ConvertConfig, beam_args: Sequence[str], argv: Sequence[str],
                break_lock: bool = False) -> int:
  """Check, build and run the pipeline; print the summary. Returns the exit code.

  Order matters: everything that can be checked (options, inputs, label map, the output's
  ownership) is checked before the output directory is created; the lock is taken before
  anything in it changes; only a successful run replaces an earlier output.
  """
  if config.append and any(a.split("=", 1)[0] in ("--template_location",
                                                  "--no_wait_until_finish") for a in beam_args):
    raise UsageError("--append publishes the new version when the job has ended, from this "
                     "process: it cannot go with --template_location or --no_wait_until_finish")
  builds_only = _building_only_args(beam_args)
  if not builds_only:
    check_classes(config)  # --append too: before anything is read in full or created
  if config.append and not builds_only:
    from beam_tfrecord.cli.append import run_append
    return run_append(config, beam_args, argv, break_lock)
  from beam_tfrecord.finalize import lock as locks
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.sources import registry

  options = pipeline_options(beam_args)
  building_only = _building_only(options)
  if not building_only:
    registry.check(config)
    # a swap a killed run left half done holds the new files beside the old: the locked
    # check below runs after it is rolled forward (outputs.recover), as the README says
    if not _swap_pending(config.output):
      outputs.check_ownership(config.output, config.overwrite,
                              config_mod.input_paths(config))
  run_id = uuid.uuid4().hex
  with private_tempdir(), terminate_as_exit():
    p = build_pipeline(options, config, argv, run_id)
    if building_only:
      return wait_for_job(p.run(), options) or EXIT_OK
    from apache_beam.io.filesystems import FileSystems
    created = not FileSystems.exists(config.output)
    if created and not paths.is_remote(config.output):
      try:
        os.makedirs(config.output, exist_ok=True)
      except OSError as e:  # a read-only parent or file system: one line, as for the lock
        print(f"beam-tfrecord: cannot create the output directory {config.output} "
              f"({e.strerror or e}); nothing was changed", file=sys.stderr)
        return EXIT_FAILED
    start = time.monotonic()
    lock = locks.OutputLock(config.output, run_id, break_lock)
    try:
      lock.acquire()
    except locks.LockNotWritten as e:  # a full disk: nothing left behind, one line
      print(f"beam-tfrecord: {config.output}: {e}", file=sys.stderr)
      if created and not paths.is_remote(config.output):
        with contextlib.suppress(OSError):
          os.rmdir(config.output)  # ours, and empty: the lock was removed
      return EXIT_FAILED
    with lock:
      repaired = outputs.recover(config.output)
      if repaired:
        print(f"beam-tfrecord: {config.output}: {repaired}", file=sys.stderr)
      outputs.check_ownership(config.output, config.overwrite,
                              config_mod.input_paths(config))
      outputs.remove_leftovers(config.output, keep=[outputs.LOCK])
      code, result = run_to_end(p, options, outputs.run_dir(config.output, run_id),
                                f"{config.output} is unchanged")
      if code is not None:
        return code
      if config.source_fingerprint is not None:  # --if-changed: the workers may have skipped
        skipped = outcome.skipped_line(result, config)
        if skipped:
          print(skipped)
          return EXIT_OK
    return outcome.summarize(config, run_id, time.monotonic() - start, created)


def check_classes(config: ConvertConfig) -> None:
  """--classes and --class-map against the classes known at launch (sources/declared.py: a
  COCO file's categories, a YOLO yaml's names, class folders, ..., and --label-map):
  UsageError, one line with the closest names, for a name that cannot be right. Where the
  classes are not known here, the run's own check finds it after reading the data."""
  if config.selection is None:
    return
  from beam_tfrecord.prepare.class_selection import undeclared_message
  from beam_tfrecord.sources import declared, registry
  label_map = (declared.label_map_classes(config.label_map, config.first_id())
               if config.label_map else None)
  problem = undeclared_message(config.selection,
                               declared.declared_classes(registry.options_of(config)),
                               declared.WHERE.get(config.format, ""), label_map,
                               config.label_map or "")
  if problem:
    raise UsageError(problem)


def _swap_pending(output: str) -> bool:
  from beam_tfrecord.finalize import output as outputs
  try:
    return outputs.pending_swap(output) is not None
  except Exception:  # an unreadable journal: the locked path says what is wrong with it
    return True


def _building_only_args(beam_args: Sequence[str]) -> bool:
  """_building_only from the command line's Beam options, without importing Beam."""
  return any(a.split("=", 1)[0] in ("--dry_run", "--template_location") for a in beam_args)


def _building_only(options) -> bool:
  """True when the run only builds a job (Dataflow --dry_run, a template): no input is read
  and no output written here."""
  from apache_beam.options.pipeline_options import (GoogleCloudOptions,
                                                    TestOptions)
  return bool(options.view_as(TestOptions).dry_run or
              options.view_as(GoogleCloudOptions).template_location)
