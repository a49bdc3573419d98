"""The names of an output directory's entries, and where a run keeps its scratch. Shared by
every stage that writes into a run directory (prepare, plan, write, finalize) and by the
readers; finalize/output.py says who owns what. Also the kill tests' fault-injection hook,
which every stage calls. Pure and Beam-free."""
from __future__ import annotations

import os

from beam_tfrecord.storage import paths

MANIFEST = "manifest.json"
LABEL_MAP = "label_map.pbtxt"
LABELS_TXT = "labels.txt"   # schemas numbering classes from 0: line i is the name of id i
OWN_PREFIX = ".beam-tfrecord-"           # every name of ours that is not an output file
RUN_PREFIX = OWN_PREFIX + "run-"         # a run's directory: staging, then its failure report
JOURNAL = OWN_PREFIX + "swap.json"       # present only while a commit is replacing files
LOCK = OWN_PREFIX + "lock"
CARD = "README.md"                       # the dataset card (finalize/card.py)
WORK = ".work"  # a run's scratch in its run directory: spilled partitions, sorted runs


def local_work_dir(run_id: str) -> str:
  """Where a local runner keeps a run's scratch when its run directory is not on local disk."""
  import tempfile
  return os.path.join(tempfile.gettempdir(), f"beam-tfrecord-work-{run_id}")


def run_dir(output: str, run_id: str) -> str:
  """The directory one run writes into before its output replaces the last one."""
  return paths.join(output, f"{RUN_PREFIX}{run_id}")


_KILL_AT = os.environ.get("BEAM_TFRECORD_KILL_AT")  # read once: checked for every image


def kill_point(point: str) -> None:
  """Fault injection for the kill tests: BEAM_TFRECORD_KILL_AT=<point> in the environment of a
  process it starts with kills it (SIGKILL, no cleanup) when it reaches that point."""
  if _KILL_AT == point:
    import signal
    os.kill(os.getpid(), signal.SIGKILL)
