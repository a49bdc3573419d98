"""Which runner runs a pipeline, as the stages that adapt to it ask: the local runners join
and sort through spill files on disk; the in-process one runs one stage at a time on one
thread, so its heavy steps hand work to processes of their own (storage/processes).
Beam-free at import: writer processes import this module."""
from __future__ import annotations

import os

# Runners that run the whole pipeline in this process, one stage at a time (the CLI's
# default, and what the DirectRunner falls back to offline).
IN_PROCESS_RUNNERS = ("FnApiRunner", "DirectRunner", "SwitchingDirectRunner")


def local_runner(root) -> bool:
  """True on Beam's local runners, in any mode: every worker runs on this machine (local disk
  is shared), and the runner holds what a shuffle groups in memory, so annotation files are
  joined and the shard order partitioned through spill files on disk instead."""
  return type(root.runner).__name__ in IN_PROCESS_RUNNERS


def in_process(root) -> bool:
  """True when the pipeline runs on the in-process local runner in its in_memory mode: one
  stage at a time, on one thread, so that a shuffle only costs and never spreads work."""
  from apache_beam.options.pipeline_options import DirectOptions
  return (type(root.runner).__name__ in IN_PROCESS_RUNNERS and
          root.options.view_as(DirectOptions).direct_running_mode == "in_memory")


def local_cores() -> int:
  """The cores this process may use."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1
