"""What the libraries a command uses may print: nothing of theirs unless asked.

TensorFlow's C++ side, absl and Beam log to stderr on their own (at import, CUDA's `cuInit`
failing on a machine without a GPU, each tf.data read), where a command's stderr should hold
only its own lines. The one place that decides it is configure(), called by cli.main before
any of them is imported:

  BEAM_TFRECORD_VERBOSE=1   libraries log as they would, Python loggers at INFO
  TF_CPP_MIN_LOG_LEVEL      TensorFlow's own variable; when set, it is used as it is
                            (otherwise 3: TensorFlow's C++ logs only a fatal error)
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile

VERBOSE_ENV = "BEAM_TFRECORD_VERBOSE"

# commands that import TensorFlow in this process (verify parses every record with it; the
# demo verifies its output); the others never import it
USES_TENSORFLOW = ("verify", "demo")

# Python loggers of the libraries, quiet below ERROR: Beam warns about its own internals, and
# absl's handler would print TensorFlow's Python-side warnings
LIBRARY_LOGGERS = ("apache_beam", "absl", "tensorflow")

# a line of absl's or TensorFlow's C++ logging ("I0000 00:00:1795870453.746844    6750
# cudart_stub.cc:31] ..."), and absl's notice before its logging is initialised
_CPP_LOG_LINE = re.compile(
    rb"^([IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]\s]+:\d+\] |WARNING: All log messages "
    rb"before absl::InitializeLog\(\) is called are written to STDERR)")


def verbose() -> bool:
  return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def configure(command: str) -> None:
  """Set up the libraries' logging for `command`, before any of them is imported."""
  if verbose():
    logging.basicConfig(level=logging.INFO)
    for name in LIBRARY_LOGGERS:
      logging.getLogger(name).setLevel(logging.NOTSET)
    return
  # read by TensorFlow's C++ side once, when it is loaded: os.environ before the import
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  for name in LIBRARY_LOGGERS:
    logging.getLogger(name).setLevel(logging.ERROR)
  if command in USES_TENSORFLOW:
    import_tensorflow()


def import_tensorflow() -> None:
  """Import TensorFlow and look for GPUs (what calls cuInit) with the C++ log lines this
  prints whatever TF_CPP_MIN_LOG_LEVEL says (absl's, written before absl's logging is set up)
  kept out of stderr. Anything else written meanwhile is passed on."""
  if "tensorflow" in sys.modules:
    return
  with _cpp_logs_dropped():
    import tensorflow as tf
    tf.config.list_physical_devices("GPU")


@contextlib.contextmanager
def _cpp_logs_dropped():
  """File descriptor 2 into a temporary file while the block runs (C++ writes there, not to
  sys.stderr); then what it got, minus C++ log lines, onto the real stderr."""
  try:
    stderr_fd = sys.__stderr__.fileno()
  except (AttributeError, OSError, ValueError):  # no real stderr: nothing to keep quiet
    yield
    return
  for stream in (sys.stderr, sys.__stderr__):
    with contextlib.suppress(OSError, ValueError):
      stream.flush()
  saved = os.dup(stderr_fd)
  with tempfile.TemporaryFile() as sink:
    os.dup2(sink.fileno(), stderr_fd)
    try:
      yield
    finally:
      with contextlib.suppress(OSError, ValueError):
        sys.__stderr__.flush()
      os.dup2(saved, stderr_fd)
      os.close(saved)
      sink.seek(0)
      kept = _without_cpp_logs(sink.read())
      if kept:
        os.write(stderr_fd, kept)


def _without_cpp_logs(text: bytes) -> bytes:
  """`text` without C++ log lines and the lines continuing them (a message of several
  lines: the line after the first does not start a new message)."""
  kept, in_log = [], False
  for line in text.splitlines(keepends=True):
    if _CPP_LOG_LINE.match(line):
      in_log = True
    elif not in_log or not line.strip():
      in_log = False
      kept.append(line)
  return b"".join(kept)
