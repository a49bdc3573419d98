"""One writer per output directory: an exclusive lock object `OUT/.beam-tfrecord-lock`.

Local disks: created with O_CREAT|O_EXCL. gs://: created with a does-not-exist precondition
(if_generation_match=0), which Cloud Storage applies atomically. Other stores: checked, then
created (not atomic; said so in the README). The lock holds host, PID, start time and the run
id. A lock whose process is gone (same host) is taken over with one line saying so; so is an
empty or unreadable lock older than a minute (a run that died, or a disk that filled, while
writing it). A lock of another host, or a fresh empty one, needs `--break-lock`. Writing the
lock either succeeds or leaves nothing behind (LockNotWritten, exit 1). The finalize step
checks that the lock still names its run before replacing the output, so a run whose stale
lock was taken over by mistake fails instead of mixing outputs.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from typing import Callable, Dict, Optional

from beam_tfrecord.errors import UsageError
from beam_tfrecord.finalize.output import LOCK
from beam_tfrecord.storage import files, gcs, paths


# An empty or unreadable lock younger than this may be one being written right now.
ABANDONED_AFTER_SECONDS = 60


class OutputLocked(UsageError):
  pass


class LockNotWritten(Exception):
  """The lock could not be written (disk full, no permission): nothing is left behind. The
  CLI prints the message as one line and exits 1."""


def _alive(pid: int) -> bool:
  """True while `pid` runs. A zombie (dead, its parent not yet told) is not alive: a run
  killed with SIGKILL whose parent died too stays one until init reaps it, which may take
  seconds on a loaded machine, and its lock must be taken over at once."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return _state(pid) not in ("Z", "X")


def _state(pid: int) -> str:
  """The process state letter from /proc/<pid>/stat ('' when it cannot be read)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0]
  except (OSError, IndexError):
    return ""


def holder_text(holder: Dict) -> str:
  return (f"run {str(holder.get('run_id', '?'))[:12]} on host {holder.get('host')} "
          f"(pid {holder.get('pid')}, started {holder.get('started')})")


def _valid(holder: Optional[Dict]) -> bool:
  """A lock that says who holds it (host and a numeric pid), as acquire writes them."""
  if not isinstance(holder, dict) or not holder.get("host"):
    return False
  try:
    return int(holder.get("pid")) > 0
  except (TypeError, ValueError):
    return False


def verdict(holder: Optional[Dict], age: Optional[float], host: str,
            alive: Callable[[int], bool] = _alive) -> str:
  """What a lock found in place means; pure (the caller reads the lock, its age and the host).

  'live': its process runs on this host; 'dead': it ran on this host and its process is gone;
  'remote': another host's, which cannot be asked; 'abandoned': empty or unreadable and older
  than ABANDONED_AFTER_SECONDS (its writer died or the disk filled); 'fresh': empty or
  unreadable and younger (maybe being written this instant)."""
  if not _valid(holder):
    return "abandoned" if age is not None and age > ABANDONED_AFTER_SECONDS else "fresh"
  if holder["host"] != host:
    return "remote"
  if not alive(int(holder["pid"])):
    return "dead"
  return "dead" if not same_process(holder) else "live"


def boot_id() -> str:
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      return f.read().strip()
  except OSError:  # not Linux
    return ""


def process_started(pid: int) -> Optional[float]:
  """When process `pid` started (seconds since the epoch), from /proc; None elsewhere."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/stat") as f:
      btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
  except (OSError, IndexError, ValueError, StopIteration):
    return None


def same_process(holder: Dict) -> bool:
  """False when the lock's PID now belongs to another process: the machine rebooted since
  (another boot id), or that process started after the lock was written (a PID reused, the
  usual case after a reboot). True when it cannot be told (the PID is then taken as the
  run's)."""
  recorded = holder.get("boot_id")
  if recorded and boot_id() and recorded != boot_id():
    return False
  started = process_started(int(holder["pid"]))
  try:
    locked = datetime.datetime.fromisoformat(str(holder.get("started"))).timestamp()
  except ValueError:
    return True
  # the lock is written after its process started; seconds are its resolution
  return started is None or started <= locked + 2


def stale(holder: Dict) -> bool:
  """True when the holder ran on this host and its process is gone."""
  return verdict(holder, None, socket.gethostname()) == "dead"


def _write_fd(fd: int, data: bytes) -> None:
  """All of `data` to a file descriptor, flushed to the disk (a full disk shows here)."""
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]
  os.fsync(fd)


def _create_exclusive(uri: str, data: bytes) -> bool:
  """Create `uri` holding `data`, only if it does not exist. False when it already exists;
  LockNotWritten (nothing left behind) when it cannot be written."""
  try:
    return _create(uri, data)
  except LockNotWritten:
    raise
  except Exception as e:  # noqa: BLE001 any store's failure: one line, never a traceback
    why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
    raise LockNotWritten(f"cannot write the lock {uri} ({why}); nothing was changed") from None


def _create(uri: str, data: bytes) -> bool:
  if not paths.is_remote(uri):
    try:
      fd = os.open(uri, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      return False
    try:
      _write_fd(fd, data)
    except BaseException:
      # an empty or partial lock would block every later run: remove what was created
      os.close(fd)
      os.unlink(uri)
      raise
    os.close(fd)
    return True
  from apache_beam.io.filesystems import FileSystems
  if FileSystems.exists(uri):
    return False
  if uri.startswith("gs://"):
    from google.api_core.exceptions import PreconditionFailed
    bucket, _, name = uri[len("gs://"):].partition("/")
    try:  # one object, created whole or not at all
      gcs.client().bucket(bucket).blob(name).upload_from_string(
          data, content_type="application/json", if_generation_match=0)
    except PreconditionFailed:
      return False
    return True
  try:
    with FileSystems.create(uri) as f:
      f.write(data)
  except BaseException:
    try:
      FileSystems.delete([uri])
    except Exception:  # noqa: BLE001 never created: nothing to remove
      pass
    raise
  return True


def _raw(uri: str) -> Optional[bytes]:
  """The lock's bytes; None when it is gone or cannot be read."""
  try:
    with files.open_read(uri) as f:
      return f.read()
  except Exception:  # noqa: BLE001 missing, or a store that cannot be asked
    return None


def _holder_of(raw: Optional[bytes]) -> Optional[Dict]:
  try:
    holder = json.loads((raw or b"").decode("utf-8") or "{}")
  except ValueError:
    return None
  return holder if isinstance(holder, dict) else None


def _age(uri: str) -> Optional[float]:
  """Seconds since the lock was last written; None when it is gone or cannot be asked."""
  try:
    if not paths.is_remote(uri):
      return time.time() - os.stat(uri).st_mtime
    from apache_beam.io.filesystems import FileSystems
    return time.time() - FileSystems.match([uri])[0].metadata_list[0].last_updated_in_seconds
  except Exception:  # noqa: BLE001
    return None


def _delete(uri: str) -> None:
  """Remove the lock; gone already is fine. Local paths without Beam (verify --repair
  locks too, and the read-only commands import no Beam)."""
  if not paths.is_remote(uri):
    try:
      os.remove(uri)
    except FileNotFoundError:
      pass
    return
  from apache_beam.io.filesystems import FileSystems
  try:
    FileSystems.delete([uri])
  except Exception:  # noqa: BLE001 another run removed it first
    pass


def read_holder(output: str) -> Optional[Dict]:
  """The lock's content ({} when empty); None when there is no readable lock."""
  raw = _raw(paths.join(output, LOCK))
  return None if raw is None else _holder_of(raw)


class OutputLock:
  """`with OutputLock(output, run_id, break_lock):` raises OutputLocked when another run
  holds it."""

  def __init__(self, output: str, run_id: str, break_lock: bool = False):
    self.output, self.run_id, self.break_lock = output, run_id, break_lock
    self.uri = paths.join(output, LOCK)
    self.held = False

  def acquire(self) -> None:
    """Take the lock, or raise OutputLocked (exit 2) / LockNotWritten (exit 1). A dead or
    abandoned lock is taken over with one line on stderr; --break-lock also takes over what
    cannot be judged (another host's lock, a fresh empty one), never a live run's."""
    if self.held:
      return
    me = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": self.run_id,
          "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "boot_id": boot_id()}
    data = json.dumps(me).encode()
    for _ in range(3):  # the lock may vanish or change between our looks: look again
      if _create_exclusive(self.uri, data):
        self.held = True
        return
      raw = _raw(self.uri)
      age = _age(self.uri)
      if raw is None and age is None:
        continue  # released meanwhile
      holder = _holder_of(raw)
      state = verdict(holder, age, me["host"])
      if state == "live" or (state in ("remote", "fresh") and not self.break_lock):
        raise OutputLocked(self._refusal(state, holder or {}))
      if _raw(self.uri) != raw:
        continue  # another run took it over first
      _delete(self.uri)
      if not _create_exclusive(self.uri, data):
        raise OutputLocked(f"output {self.output}: another run took the lock while this one "
                           "was taking over a stale one")
      self.held = True
      print(f"beam-tfrecord: {self.output}: {self._takeover(state, holder or {}, age)}",
            file=sys.stderr)
      return
    raise OutputLocked(f"output {self.output}: its lock {LOCK} keeps changing; another run is "
                       "starting there")

  def _refusal(self, state: str, holder: Dict) -> str:
    where = f"output {self.output} is locked by"
    if state == "live":
      return (f"{where} {holder_text(holder)}, which is still running; " +
              ("--break-lock takes over only a dead run's lock" if self.break_lock
               else "wait for it to finish"))
    if state == "remote":
      return (f"{where} {holder_text(holder)}, on another host; pass --break-lock only if "
              "you know that run is dead")
    return (f"{where} a run that is writing its lock right now ({LOCK} is empty or "
            "unreadable and less than a minute old); try again, or pass --break-lock if "
            "no run is starting there")

  @staticmethod
  def _takeover(state: str, holder: Dict, age: Optional[float]) -> str:
    if state == "dead":
      return (f"took over the lock of {holder_text(holder)}: that process is gone (or its "
              "PID now belongs to another process)")
    if state == "abandoned":
      return (f"took over an empty or unreadable lock {LOCK} left {age:.0f} s ago by a run "
              "that died while writing it")
    return f"broke the lock of {holder_text(holder) if _valid(holder) else 'an unknown run'} " \
        "(--break-lock)"

  def release(self) -> None:
    if not self.held:
      return
    holder = read_holder(self.output)
    if holder and holder.get("run_id") == self.run_id:
      _delete(self.uri)
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
