"""Progress while a conversion runs: shards finished so far, watched in the staging directory.

Works for every runner and filesystem (it only lists files). On a terminal it is a live rich
status line; otherwise (cron, Airflow logs) a plain line every `log_every` seconds.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Optional

from beam_tfrecord import paths


def _finished_shards(staging: str) -> int:
  from apache_beam.io.filesystems import FileSystems
  try:
    found = FileSystems.match([paths.join(paths.glob_escape(staging), "*.tfrecord")])[0] \
        .metadata_list
  except Exception:
    return 0
  return sum(1 for m in found if not m.path.replace("\\", "/").rsplit("/", 1)[-1].startswith("."))


class Progress:
  """Context manager: `with Progress(staging): result.wait_until_finish()`."""

  def __init__(self, staging: str, interval: float = 1.0, log_every: float = 30.0):
    self.staging, self.interval, self.log_every = staging, interval, log_every
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None
    self.start = time.monotonic()

  def _text(self) -> str:
    return (f"converting: {_finished_shards(self.staging)} shards written, "
            f"{time.monotonic() - self.start:.0f} s")

  def _run(self) -> None:
    if sys.stderr.isatty():
      from rich.console import Console
      with Console(stderr=True).status(self._text()) as status:
        while not self._stop.wait(self.interval):
          status.update(self._text())
    else:
      while not self._stop.wait(self.log_every):
        print(self._text(), file=sys.stderr, flush=True)

  def __enter__(self) -> "Progress":
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    if self._thread:
      self._thread.join(timeout=5)
