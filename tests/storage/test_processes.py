"""storage/processes: a run's worker processes, handed from one pool to the next."""
from __future__ import annotations

import os

import pytest

from beam_tfrecord.storage import processes

PID = "os:readlink"  # of "/proc/self": the worker's pid


def _pool_answers(function, tasks, count=1):
  pool = processes.Pool(count, function)
  try:
    return [pool.submit(t).result(timeout=60) for t in tasks]
  finally:
    pool.shutdown()


def _pids(n, count=1):
  return [int(pid) for pid in _pool_answers(PID, ["/proc/self"] * n, count)]


@pytest.fixture
def starts(monkeypatch):
  started, start = [], processes._start
  monkeypatch.setattr(processes, "_start", lambda f: started.append(f) or start(f))
  return started


def test_a_later_pool_gets_the_process_of_an_earlier_one(starts):
  pids = _pids(2)
  names = _pool_answers("posixpath:basename", ["/a/b.txt"])
  again = _pids(1)
  assert len(set(pids)) == 1 and pids[0] != os.getpid()  # one process, not this one
  assert names == ["b.txt"] and again == pids[:1]  # another function, the same process
  assert starts == [PID]
  processes.stop_idle()
  assert _pids(1) != pids[:1]
  assert len(starts) == 2


def test_only_a_process_of_the_same_environment_is_reused(starts, monkeypatch):
  before = _pool_answers("os:getenv", ["BEAM_TFRECORD_TEST_VALUE"])
  monkeypatch.setenv("BEAM_TFRECORD_TEST_VALUE", "set")
  after = _pool_answers("os:getenv", ["BEAM_TFRECORD_TEST_VALUE"])
  assert before == [None] and after == ["set"] and len(starts) == 2


def test_a_dead_idle_process_is_replaced(starts):
  pid = _pids(1)[0]
  os.kill(pid, 9)
  again = _pids(1)[0]
  assert again != pid and len(starts) == 2


def test_stop_idle_ends_the_processes(starts):
  pids = _pids(2, count=2)
  processes.stop_idle()
  for pid in set(pids):
    with pytest.raises(ProcessLookupError):
      os.kill(pid, 0)


def test_a_kept_process_that_ends_before_its_task_is_replaced(starts, monkeypatch):
  """Killed while kept, it may still look alive when leased: the task goes to a new one."""
  pid = _pids(1)[0]
  lease = processes._lease

  def killed_after_lease(function):
    proc, answers, kept = lease(function)
    os.kill(proc.pid, 9)
    proc.wait()
    return proc, answers, kept

  monkeypatch.setattr(processes, "_lease", killed_after_lease)
  again = _pids(1)[0]
  assert again != pid and len(starts) == 2


def test_a_new_run_starts_its_own_processes(starts, tmp_path):
  """pipeline.build ends the processes an earlier run in this process left (their module
  caches, such as listings, belong to that run), whoever ran it."""
  import apache_beam as beam

  from beam_tfrecord import config, pipeline
  pid = _pids(1)[0]
  images = tmp_path / "images"
  images.mkdir()
  (tmp_path / "a.json").write_text('{"images": [], "annotations": [], "categories": []}')
  pipeline.build(beam.Pipeline(), config.ConvertConfig(
      format="coco", inputs=[str(tmp_path / "a.json")], images=[str(images)],
      output=str(tmp_path / "out")))
  with pytest.raises(ProcessLookupError):
    os.kill(pid, 0)
  assert _pids(1)[0] != pid
