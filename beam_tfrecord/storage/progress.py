"""Progress while a conversion runs: images done out of the planned total, rate and ETA.

Beam's local runners may run the writers in other processes (multi_processing), so nothing is
counted in memory: the plan step writes each split's planned image count once
(STAGING/.planned-SPLIT) and every shard writer rewrites its own count of images done
(STAGING/.done-SHARD, written or rejected) at most every half second and when the shard is
complete. The watcher in the launching process adds them up. The files live in the run's
staging directory, which the finalize step deletes, and never touch the shards' bytes.
Local staging only: on gs:// or s3:// (Dataflow) the watcher counts finished shards instead.

On a terminal the line is a live rich status; otherwise (cron, Airflow logs) a plain line
every `log_every` seconds.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Optional, Tuple

from beam_tfrecord.storage import paths

PLANNED = ".planned-"
DONE = ".done-"
WRITE_EVERY = 0.5  # seconds between a shard writer's progress writes (a few µs each)


def _write(path: str, value: int) -> None:
  """Replace the file's content atomically: a reader never sees a half-written number."""
  tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.w"
  with open(tmp, "w") as f:
    f.write(str(value))
  os.replace(tmp, path)


def record_planned(staging: str, split: str, count: int) -> None:
  """Called once per split by the plan step."""
  if paths.is_remote(staging):
    return
  os.makedirs(staging, exist_ok=True)
  _write(os.path.join(staging, PLANNED + split), count)


class ShardCounter:
  """Images one shard writer has finished; a retried shard starts again from 0 under the
  same file name, so retries are not counted twice."""

  def __init__(self, staging: str, shard_name: str, every: float = WRITE_EVERY):
    self.path = None if paths.is_remote(staging) else os.path.join(staging, DONE + shard_name)
    self.every = every
    self.count = 0
    self._last = time.monotonic()
    if self.path:
      os.makedirs(staging, exist_ok=True)

  def tick(self) -> None:
    self.count += 1
    if self.path and time.monotonic() - self._last >= self.every:
      self._flush()

  def close(self) -> None:
    if self.path:
      self._flush()

  def _flush(self) -> None:
    _write(self.path, self.count)
    self._last = time.monotonic()


def snapshot(staging: str) -> Tuple[int, Optional[int], Optional[float]]:
  """(images done, images planned, when the plan was written (time.time())) of a local run;
  the last two are None before the plan is known."""
  done, planned, planned_at = 0, 0, None
  try:
    names = os.listdir(staging)
  except OSError:
    return 0, None, None
  for name in names:
    if name.endswith(".w") or not name.startswith((DONE, PLANNED)):
      continue
    path = os.path.join(staging, name)
    try:
      with open(path) as f:
        value = int(f.read() or 0)
      mtime = os.stat(path).st_mtime
    except (OSError, ValueError):  # replaced or removed while listing
      continue
    if name.startswith(DONE):
      done += value
    else:
      planned += value
      planned_at = mtime if planned_at is None else min(planned_at, mtime)
  return done, (planned if planned_at is not None else None), planned_at


def _finished_shards(staging: str) -> int:
  from apache_beam.io.filesystems import FileSystems
  try:
    found = FileSystems.match([paths.join(paths.glob_escape(staging), "*.tfrecord")])[0] \
        .metadata_list
  except Exception:
    return 0
  return sum(1 for m in found if not m.path.replace("\\", "/").rsplit("/", 1)[-1].startswith("."))


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  minutes, seconds = divmod(seconds, 60)
  if minutes < 60:
    return f"{minutes} min {seconds:02d} s"
  hours, minutes = divmod(minutes, 60)
  return f"{hours} h {minutes:02d} min"


def describe(done: int, total: Optional[int], elapsed: float, writing: float) -> str:
  """The progress line. `writing`: seconds since the plan (the total) became known."""
  if total is None:
    return f"converting: reading annotations and planning shards, {_duration(elapsed)}"
  text = f"converting: {done:,} / {total:,} images"
  if total:
    text += f" ({100 * done / total:.0f}%)"
  if done and writing > 0:
    rate = done / writing
    text += f", {rate:,.0f} images/s"
    if done < total:
      text += f", ETA {_duration((total - done) / rate)}"
  return text + f", {_duration(elapsed)}"


class Progress:
  """Context manager: `with Progress(staging): result.wait_until_finish()`."""

  def __init__(self, staging: str, interval: float = 0.5, log_every: float = 30.0):
    self.staging, self.interval, self.log_every = staging, interval, log_every
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None
    self.start = time.monotonic()
    self.last: Tuple[int, Optional[int]] = (0, None)  # the latest snapshot, for tests

  def _text(self) -> str:
    now = time.monotonic()
    if paths.is_remote(self.staging):
      return (f"converting: {_finished_shards(self.staging)} shards written, "
              f"{_duration(now - self.start)}")
    done, total, planned_at = snapshot(self.staging)
    if total is None and self.last[1] is not None:  # staging removed: the finalize step runs
      return f"converting: {self.last[1]:,} images done, finishing, {_duration(now - self.start)}"
    self.last = (max(done, self.last[0]), total if total is not None else self.last[1])
    writing = time.time() - planned_at if planned_at is not None else 0.0
    return describe(done, total, now - self.start, writing)

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
