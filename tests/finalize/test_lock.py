"""finalize/lock.py: one writer per output; locks that heal.

A lock whose process is gone (same host) is taken over with one line; an empty or unreadable
lock older than a minute is stale, a fresh one is not; a lock that cannot be written leaves
nothing behind (exit 1, one line); `verify --repair` holds the lock while it repairs.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_dataset, subprocess_env

from beam_tfrecord import cli
from beam_tfrecord.finalize import lock
from beam_tfrecord.finalize import output as outputs

HOST = socket.gethostname()


def one_line(err: str) -> str:
  lines = [line for line in err.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


def killed_pid() -> int:
  """The pid of a process that was running and was killed (SIGKILL), reaped."""
  proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  proc.kill()
  proc.wait()
  return proc.pid


def write_lock(out: Path, pid: int, run_id: str = "deadrun", host: str = HOST) -> Path:
  """A lock file as OutputLock.acquire writes it."""
  path = out / outputs.LOCK
  import datetime
  now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  path.write_text(json.dumps({"host": host, "pid": pid, "run_id": run_id, "started": now}))
  return path


def test_verdict_of_each_kind_of_lock():
  alive = {100}.__contains__
  me = {"host": "h", "pid": 100, "run_id": "r"}
  assert lock.verdict(me, 5, "h", alive) == "live"
  assert lock.verdict({**me, "pid": 101}, 5, "h", alive) == "dead"
  assert lock.verdict({**me, "pid": 101}, 5, "other", alive) == "remote"
  for unreadable in (None, {}, {"host": "h"}, {"host": "h", "pid": "x"}, []):
    assert lock.verdict(unreadable, 5, "h", alive) == "fresh"
    assert lock.verdict(unreadable, None, "h", alive) == "fresh"
    assert lock.verdict(unreadable, lock.ABANDONED_AFTER_SECONDS + 1, "h", alive) == "abandoned"


def test_a_killed_process_lock_is_taken_over_with_one_line(tmp_path, capsys):
  pid = killed_pid()
  write_lock(tmp_path, pid)
  with lock.OutputLock(str(tmp_path), "newrun") as held:
    assert held.held
    assert lock.read_holder(str(tmp_path))["run_id"] == "newrun"
    line = one_line(capsys.readouterr().err)
    assert "took over the lock of run deadrun" in line and f"pid {pid}" in line
    assert "gone" in line
  assert not (tmp_path / outputs.LOCK).exists()  # released


def test_an_empty_lock_is_stale_only_after_a_minute(tmp_path, capsys):
  path = tmp_path / outputs.LOCK
  path.write_bytes(b"")  # what a full disk left while the lock was created
  with pytest.raises(lock.OutputLocked, match="writing its lock right now"):
    lock.OutputLock(str(tmp_path), "newrun").acquire()
  assert path.read_bytes() == b""  # a fresh one may be a run starting: left alone
  old = time.time() - lock.ABANDONED_AFTER_SECONDS - 30
  os.utime(path, (old, old))
  with lock.OutputLock(str(tmp_path), "newrun"):
    assert lock.read_holder(str(tmp_path))["run_id"] == "newrun"
    assert "empty or unreadable lock" in one_line(capsys.readouterr().err)
  path.write_bytes(b'{"host": "h", "pi')  # cut short: unreadable, old
  os.utime(path, (old, old))
  with lock.OutputLock(str(tmp_path), "third"):
    assert lock.read_holder(str(tmp_path))["run_id"] == "third"


def test_break_lock_takes_a_fresh_empty_or_remote_lock_never_a_live_one(tmp_path, capsys):
  path = tmp_path / outputs.LOCK
  write_lock(tmp_path, 1, host="elsewhere")
  with pytest.raises(lock.OutputLocked, match="another host.*--break-lock"):
    lock.OutputLock(str(tmp_path), "x").acquire()
  with lock.OutputLock(str(tmp_path), "x", break_lock=True):
    assert "broke the lock of run deadrun" in one_line(capsys.readouterr().err)
  path.write_bytes(b"")
  with lock.OutputLock(str(tmp_path), "y", break_lock=True):
    assert lock.read_holder(str(tmp_path))["run_id"] == "y"
  write_lock(tmp_path, os.getpid(), "alive")
  with pytest.raises(lock.OutputLocked, match="still running"):
    lock.OutputLock(str(tmp_path), "z", break_lock=True).acquire()
  assert lock.read_holder(str(tmp_path))["run_id"] == "alive"


def _disk_full(fd, data):
  raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_lock_that_cannot_be_written_leaves_nothing(tmp_path, monkeypatch):
  monkeypatch.setattr(lock, "_write_fd", _disk_full)
  with pytest.raises(lock.LockNotWritten, match="No space left on device"):
    lock.OutputLock(str(tmp_path), "run").acquire()
  assert list(tmp_path.iterdir()) == []


def test_verify_repair_on_a_full_disk_exits_1_with_one_line(tmp_path, monkeypatch, capsys):
  from beam_tfrecord.readback import verify
  monkeypatch.setattr(lock, "_write_fd", _disk_full)
  assert cli.main(["verify", "--repair", str(tmp_path)]) == 1
  captured = capsys.readouterr()
  assert "No space left on device" in one_line(captured.err) and captured.out == ""
  assert list(tmp_path.iterdir()) == []
  assert verify.run(str(tmp_path), repair=True) == 1


@pytest.mark.e2e
def test_convert_on_a_full_disk_exits_1_with_one_line_and_no_lock(tmp_path, monkeypatch,
                                                                   capsys):
  ds = make_dataset(tmp_path / "data", count=4, extras=False)
  monkeypatch.setattr(lock, "_write_fd", _disk_full)
  out = tmp_path / "out"
  capsys.readouterr()
  code = cli.main(["convert", "--format=coco", *ds.inputs("coco"), f"--output={out}"])
  line = one_line(capsys.readouterr().err)
  assert code == 1 and "No space left on device" in line and outputs.LOCK in line
  assert not out.exists()  # created by the run, removed again: no empty lock, no folder
  monkeypatch.undo()  # space again: the next run is not blocked by anything
  assert cli.main(["convert", "--format=coco", *ds.inputs("coco"), f"--output={out}"]) == 0
  assert not (out / outputs.LOCK).exists()


@pytest.mark.e2e
def test_verify_repair_holds_the_lock_and_leaves_no_stale_one(tmp_path, monkeypatch, capsys):
  ds = make_dataset(tmp_path / "data", count=4, extras=False)
  out = tmp_path / "out"
  convert = ["convert", "--format=coco", *ds.inputs("coco"), f"--output={out}", "--overwrite"]
  assert cli.main(convert) == 0
  # a run killed in the middle of replacing the output: its journal and its lock stay behind
  proc = subprocess.Popen([sys.executable, "-m", "beam_tfrecord.cli", *convert],
                          env=subprocess_env(BEAM_TFRECORD_KILL_AT="swap-move"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  _, stderr = proc.communicate(timeout=300)
  assert proc.returncode == -9, stderr[-2000:]
  assert lock.read_holder(str(out))["pid"] == proc.pid
  assert outputs.pending_swap(str(out)) is not None

  # a live run holds the lock: --repair waits its turn, nothing is touched
  (out / outputs.LOCK).unlink()
  with lock.OutputLock(str(out), "live-run"):  # this process: alive
    capsys.readouterr()
    assert cli.main(["verify", "--repair", str(out)]) == 2
    assert "still running" in one_line(capsys.readouterr().err)
    assert outputs.pending_swap(str(out)) is not None
  write_lock(out, proc.pid, "killedrun")  # the killed run's lock, as it left it

  seen = []
  recover = outputs.recover

  def watched(output):
    seen.append(lock.read_holder(output))
    return recover(output)

  monkeypatch.setattr(outputs, "recover", watched)
  capsys.readouterr()
  assert cli.main(["verify", "--repair", str(out)]) == 0
  captured = capsys.readouterr()
  assert [h["run_id"].startswith("verify-") and h["pid"] == os.getpid() for h in seen] == [True]
  assert f"pid {proc.pid}" in one_line(captured.err) and "took over" in captured.err
  assert "completed the interrupted replacement" in captured.out
  assert not (out / outputs.LOCK).exists()
  assert outputs.pending_swap(str(out)) is None
  capsys.readouterr()
  assert cli.main(convert) == 0 and capsys.readouterr().err == ""  # nothing stale left


def test_a_lock_whose_pid_now_belongs_to_another_process_is_stale(tmp_path):
  """Issue 30, item 6: after a reboot the lock's PID is often some other live process. A
  process that started after the lock was written, or a lock from another boot, is not the
  run that wrote it: the lock is taken over, with one line."""
  import datetime
  import socket
  from beam_tfrecord.finalize import lock as locks_
  other = os.getppid()  # alive, and started long before the lock below
  long_ago = (datetime.datetime.now(datetime.timezone.utc)
              - datetime.timedelta(days=3650)).isoformat(timespec="seconds")
  reused = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": "old",
            "started": long_ago}
  assert locks_.verdict(reused, 5.0, socket.gethostname()) == "dead"
  fresh = dict(reused, started=datetime.datetime.now(datetime.timezone.utc).isoformat(
      timespec="seconds"), pid=other)
  assert locks_.verdict(fresh, 5.0, socket.gethostname()) == "live"
  rebooted = dict(fresh, boot_id="not-this-boot")
  assert locks_.verdict(rebooted, 5.0, socket.gethostname()) == "dead"
  (tmp_path / locks_.LOCK).write_text(json.dumps(reused))
  lock = locks_.OutputLock(str(tmp_path), "new")
  lock.acquire()
  assert json.loads((tmp_path / locks_.LOCK).read_text())["run_id"] == "new"
  lock.release()


def test_a_zombie_holder_is_dead(tmp_path):
  """A run killed with SIGKILL is a zombie until its parent (often init) reaps it; on a loaded
  machine that takes seconds. Its lock is a dead run's lock, taken over at once (the cron
  wrapper's hard-kill test failed under load on exactly this)."""
  import datetime
  child = subprocess.Popen([sys.executable, "-c", "pass"])
  deadline = time.monotonic() + 30
  while lock._state(child.pid) != "Z":  # exited, not reaped: we have not waited for it
    assert time.monotonic() < deadline, "the child never became a zombie"
    time.sleep(0.02)
  try:
    os.kill(child.pid, 0)  # a zombie still answers signal 0
    holder = {"host": HOST, "pid": child.pid, "run_id": "killed",
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds")}
    assert lock.verdict(holder, 5.0, HOST) == "dead"
    (tmp_path / lock.LOCK).write_text(json.dumps(holder))
    taken = lock.OutputLock(str(tmp_path), "next")
    taken.acquire()
    assert json.loads((tmp_path / lock.LOCK).read_text())["run_id"] == "next"
    taken.release()
  finally:
    child.wait()
  assert not lock._alive(child.pid)
