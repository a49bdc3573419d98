"""Worker processes for the steps the in-process runner would run on its one thread.

The in-process local runner runs one stage at a time on one thread. Two steps hand their
work to processes of their own so that a run uses every core: the shard writer
(write/shard_writer.WriterPool) and the COCO join of an annotation file's partitions
(sources/coco/join_pool). `Pool(n, "module:function").submit(task)` hands a picklable task to
the next free process, which answers `function(task)`.

Each process is a plain `python -c` that imports the function's module only (a writer: 0.2 s)
and reads pickled (function, task) pairs from its stdin, answering on a pipe of its own (its
stdout and stderr stay the user's). A pool's processes outlive it: `shutdown` hands them to
the next pool of the run (the join's to the sort's, the sort's to the writers'), which saves
each later pool its starts (a start: an interpreter and its imports, ~0.3 CPU-s); `stop_idle`
ends them when the run ends, and only a process started with the same environment is reused.
concurrent.futures.ProcessPoolExecutor was measured first: its workers re-import the main
module (`beam-tfrecord` imports Beam: +2.5 s per run), fail when that is `<stdin>`, and
outlive a SIGKILLed run. A process here sees EOF on stdin when the run's
process is gone, finishes its task and exits. Beam-free.
"""
from __future__ import annotations

import collections
import concurrent.futures
import importlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Tuple


class ProcessDied(RuntimeError):
  """A worker process ended without answering (killed, out of memory)."""


class Pool:
  """`processes` worker processes calling `function` ("package.module:name") on tasks.

  `submit` waits while `processes` tasks are queued: a task may hold much (a shard's
  annotations), and queueing every task at once kept all of them alive (+50 MB at 20,000
  images). `eager`: start the processes now (their imports then overlap what the caller does
  before its first task), not at the first task. `what(task)`: the task as a failure's
  message names it."""

  def __init__(self, processes: int, function: str, eager: bool = False,
               what: Callable[[Any], str] = lambda task: "a task"):
    self._function, self._what = function, what
    self._tasks: "queue.Queue" = queue.Queue(maxsize=processes)
    self._threads = [threading.Thread(target=self._feed, args=(eager,), daemon=True,
                                      name=f"{function.rpartition(':')[2]}-{i}")
                     for i in range(processes)]
    for thread in self._threads:
      thread.start()

  def submit(self, task) -> "concurrent.futures.Future":
    future: concurrent.futures.Future = concurrent.futures.Future()
    self._tasks.put((task, future))
    return future

  def shutdown(self) -> None:
    for _ in self._threads:
      self._tasks.put(None)
    for thread in self._threads:
      thread.join()

  def died(self, task, code) -> ProcessDied:
    return ProcessDied(f"a worker process died (exit code {code}: killed, or out of memory?) "
                       f"while doing {self._what(task)}")

  def _feed(self, eager: bool) -> None:
    """One process's thread: start it (now, or on the first task), pass it tasks until
    shutdown."""
    # kept: a process another pool left, not yet asked anything by this one
    proc, answers, kept = _lease(self._function) if eager else (None, None, False)
    try:
      while True:
        item = self._tasks.get()
        if item is None:
          return
        task, future = item
        if not future.set_running_or_notify_cancel():
          continue
        try:
          if proc is None:
            proc, answers, kept = _lease(self._function)
          try:
            ok, value = self._ask(proc, answers, task)
          except (EOFError, OSError, pickle.UnpicklingError):
            if not kept:
              raise
            # it ended while kept (killed, out of memory): the task goes to a new process
            _stop(proc, answers, kill=True)
            proc, answers = _start(self._function)
            ok, value = self._ask(proc, answers, task)
          kept = False
        except (EOFError, OSError, pickle.UnpicklingError) as e:
          code = proc.poll() if proc is not None else None
          died = self.died(task, code)
          future.set_exception(type(died)(f"{died}: {type(e).__name__}"))
          if proc is not None:  # reap it and close its pipes; the next task starts a new one
            _stop(proc, answers, kill=True)
          proc, kept = None, False
          continue
        if ok:
          future.set_result(value)
        else:
          future.set_exception(value)
    finally:
      if proc is not None:
        _release(proc, answers)

  def _ask(self, proc: subprocess.Popen, answers, task):
    pickle.dump((self._function, task), proc.stdin, pickle.HIGHEST_PROTOCOL)
    proc.stdin.flush()
    return pickle.load(answers)


class InOrder:
  """A bundle's futures, their results given in the order they were added, as they finish:
  a result waiting for the bundle's end would hold what it carries until then. A failure
  cancels the futures not begun (the bundle fails: nothing more is done)."""

  def __init__(self):
    self._pending: collections.deque = collections.deque()

  def add(self, future: "concurrent.futures.Future") -> None:
    self._pending.append(future)

  def results(self, wait: bool) -> Iterator[Any]:
    """The results of the futures finished so far, in order; with `wait`, of all of them."""
    while self._pending and (wait or self._pending[0].done()):
      future = self._pending.popleft()
      try:
        result = future.result()
      except BaseException:
        for rest in self._pending:
          rest.cancel()
        self._pending.clear()
        raise
      yield result


def _stop(proc: subprocess.Popen, answers, kill: bool = False) -> None:
  for closing in (proc.stdin, answers):
    try:
      closing.close()
    except OSError:  # the pipe of a dead process
      pass
  if kill:
    proc.kill()
  proc.wait()


# Processes whose pool was shut down, by the environment they were started with (a task
# reads settings from it, as tests' kill points), each with the file its answers come from
_idle: Dict[Tuple, List[Tuple[subprocess.Popen, Any]]] = {}
_idle_lock = threading.Lock()


def _environment() -> Dict[str, str]:
  return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def _signature(env: Dict[str, str]) -> Tuple:
  return (sys.executable, *sorted(env.items()))


def _lease(function: str):
  """(process, answers, kept): an idle process started with this environment (kept), else a
  new one, which imports `function`'s module first."""
  signature = _signature(_environment())
  with _idle_lock:
    found = _idle.get(signature, [])
    while found:
      proc, answers = found.pop()
      if proc.poll() is None:
        return proc, answers, True
      _stop(proc, answers)
  return (*_start(function), False)


def _release(proc: subprocess.Popen, answers) -> None:
  """A shut-down pool's process: kept for the next pool while it runs."""
  if proc.poll() is not None:
    _stop(proc, answers)
    return
  with _idle_lock:
    _idle.setdefault(proc.signature, []).append((proc, answers))


def stop_idle() -> None:
  """End the processes no pool uses (the end of a run: none is kept across runs)."""
  with _idle_lock:
    idle = [p for found in _idle.values() for p in found]
    _idle.clear()
  for proc, answers in idle:
    _stop(proc, answers)


def _start(function: str):
  """A worker process, `function`'s module imported first, and the file its answers come
  from."""
  read_fd, write_fd = os.pipe()
  env = _environment()
  try:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from beam_tfrecord.storage.processes import serve; "
         "serve(int(sys.argv[1]), sys.argv[2])", str(write_fd), function],
        stdin=subprocess.PIPE, pass_fds=(write_fd,), env=env)
  finally:
    os.close(write_fd)
  proc.signature = _signature(env)
  return proc, os.fdopen(read_fd, "rb")


def _imported(function: str) -> Callable[[Any], Any]:
  import gc
  module, _, name = function.partition(":")
  call = getattr(importlib.import_module(module), name)
  gc.freeze()  # the imports are never garbage: collections need not walk them again
  return call


def serve(answer_fd: int, function: str) -> None:
  """A worker process's loop: (function, task) pairs from stdin, (ok, function(task) or
  exception) to `answer_fd`, until stdin ends. `function` is imported at once: its imports
  then overlap what the run does before the first task."""
  calls = {function: _imported(function)}
  answers = os.fdopen(answer_fd, "wb")
  last = function
  while True:
    try:
      function, task = pickle.load(sys.stdin.buffer)
    except EOFError:
      return
    if function != last:  # another step's tasks: what the last one freed goes back first
      release_freed_memory()
      last = function
    call = calls.get(function) or calls.setdefault(function, _imported(function))
    try:
      answer = (True, call(task))
    except Exception as e:  # raised in the caller, as it would be without worker processes
      answer = (False, e)
    try:
      data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that does not pickle
      data = pickle.dumps((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))
    answers.write(data)
    answers.flush()


def release_freed_memory() -> None:
  """Hand the heap freed so far back to the operating system (glibc's malloc_trim; elsewhere
  only the collection): before a run's peak (the shards written beside the runner's process),
  and in a worker process that goes on to another step's tasks (a join's buffers). The
  process's own symbols hold libc's: ctypes.util.find_library ran `ldconfig -p`, a fork of
  the runner's whole process, before every write step."""
  import ctypes
  import gc
  gc.collect()
  try:
    ctypes.CDLL(None).malloc_trim(0)
  except (OSError, AttributeError):  # not glibc
    pass
