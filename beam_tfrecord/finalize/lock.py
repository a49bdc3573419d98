"""One writer per output directory: an exclusive lock object `OUT/.beam-tfrecord-lock`.

Local disks: created with O_CREAT|O_EXCL. gs://: created with a does-not-exist precondition
(if_generation_match=0), which Cloud Storage applies atomically. Other stores: checked, then
created (not atomic; said so in the README). The lock holds host, PID, start time and the run
id; a lock whose process is gone (same host) is reported as stale and `--break-lock` takes it
over. The finalize step checks that the lock still names its run before replacing the output.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
from typing import Dict, Optional

from beam_tfrecord.errors import UsageError
from beam_tfrecord.finalize.output import LOCK
from beam_tfrecord.storage import gcs, paths


class OutputLocked(UsageError):
  pass


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def holder_text(holder: Dict) -> str:
  return (f"run {holder.get('run_id', '?')[:12]} on host {holder.get('host')} "
          f"(pid {holder.get('pid')}, started {holder.get('started')})")


def stale(holder: Dict) -> bool:
  """True when the holder ran on this host and its process is gone."""
  return holder.get("host") == socket.gethostname() and not _alive(int(holder.get("pid", 0)))


def _create_exclusive(uri: str, data: bytes) -> bool:
  """Create `uri` only if it does not exist. False when it already exists."""
  if not paths.is_remote(uri):
    try:
      fd = os.open(uri, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      return False
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    return True
  from apache_beam.io.filesystems import FileSystems
  if FileSystems.exists(uri):
    return False
  if uri.startswith("gs://"):
    from google.api_core.exceptions import PreconditionFailed
    bucket, _, name = uri[len("gs://"):].partition("/")
    try:
      gcs.client().bucket(bucket).blob(name).upload_from_string(
          data, content_type="application/json", if_generation_match=0)
    except PreconditionFailed:
      return False
    return True
  with FileSystems.create(uri) as f:
    f.write(data)
  return True


def read_holder(output: str) -> Optional[Dict]:
  from apache_beam.io.filesystems import FileSystems
  uri = paths.join(output, LOCK)
  try:
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      return json.loads(f.read().decode("utf-8") or "{}")
  except Exception:
    return None


class OutputLock:
  """`with OutputLock(output, run_id, break_lock):` raises OutputLocked when another run holds it."""

  def __init__(self, output: str, run_id: str, break_lock: bool = False):
    self.output, self.run_id, self.break_lock = output, run_id, break_lock
    self.uri = paths.join(output, LOCK)
    self.held = False

  def acquire(self) -> None:
    me = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": self.run_id,
          "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    data = json.dumps(me).encode()
    if _create_exclusive(self.uri, data):
      self.held = True
      return
    holder = read_holder(self.output) or {}
    if not self.break_lock:
      state = ("stale: that process is gone; pass --break-lock to take it over"
               if stale(holder) else "pass --break-lock only if you know that run is dead")
      raise OutputLocked(f"output {self.output} is locked by {holder_text(holder)}; {state}")
    if holder.get("host") == socket.gethostname() and _alive(int(holder.get("pid", 0))):
      raise OutputLocked(f"output {self.output} is locked by {holder_text(holder)}, which is "
                         "still running; --break-lock takes over only a dead run's lock")
    from apache_beam.io.filesystems import FileSystems
    FileSystems.delete([self.uri])
    if not _create_exclusive(self.uri, data):
      raise OutputLocked(f"output {self.output}: another run took the lock while breaking it")
    self.held = True

  def release(self) -> None:
    if not self.held:
      return
    holder = read_holder(self.output)
    if holder and holder.get("run_id") == self.run_id:
      from apache_beam.io.filesystems import FileSystems
      FileSystems.delete([self.uri])
    self.held = False

  def __enter__(self) -> "OutputLock":
    self.acquire()
    return self

  def __exit__(self, *exc) -> None:
    self.release()


def held_by(output: str, run_id: str) -> bool:
  """True when the output's lock names `run_id` (or there is no lock at all: a pipeline
  built without the CLI, e.g. by a test or a template, takes no lock)."""
  holder = read_holder(output)
  return holder is None or holder.get("run_id") == run_id
