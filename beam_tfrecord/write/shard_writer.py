"""Writing one shard: read, convert and frame a shard's images into one TFRecord file.

`write_shard` is the whole job of the shard writer DoFn (sink._WriteShard) for one
(split, shard) group, as a plain function of a picklable `ShardTask`. On the in-process local
runner the DoFn hands shards to a `WriterPool` of processes, so that conversion uses every core
(the local runner runs the write stage on one thread). Each shard is still written by exactly
one writer, in (key, uri) order, so the bytes do not depend on the number of processes.

This module does not import Apache Beam for local files: a writer process imports it and the
encoder only (0.4 s), where `import apache_beam` alone took 3.8 s on this machine.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import pickle
import queue
import subprocess
import sys
import threading
import uuid
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from beam_tfrecord.finalize import progress
from beam_tfrecord.finalize.output import kill_point
from beam_tfrecord.plan import naming, runs
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.records.tfrecord import framing
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.prefetch import prefetch
from beam_tfrecord.write.encode import (Converted, EncodeOptions, convert,
                                        fetch_image)

# Read-ahead of the shard writer (beam_tfrecord.storage.prefetch): threads, and a cap on the bytes
# fetched but not yet written. Writer processes (WriterPool) read their local files inline:
# with every core converting, read-ahead threads only took turns with them (20,000 images,
# 2 processes: 19.5-20.8 s with two threads each, 17.6-18.0 s without).
REMOTE_READ_AHEAD = 16
LOCAL_READ_AHEAD = 2
READ_AHEAD_BYTES = 64 * 1024 * 1024
WRITE_BUFFER_BYTES = 1024 * 1024

# images: images written (a schema may write several records, `examples`, per image, or none);
# rejected: images of this shard/split turned down while writing. images + rejected must add
# up to the planned count (the finalize step checks, so a runner that loses records fails).
STAT_COUNTS = ("examples", "objects", "bytes", "clipped", "reoriented", "rejected", "images")


def new_stats(split: str, shard: Optional[int], path: str) -> Dict:
  stats = {"split": split, "shard": shard, "path": path, "classes": {}}
  stats.update({k: 0 for k in STAT_COUNTS})
  return stats


def add_example(stats: Dict, result: Converted) -> None:
  stats["images"] += 1
  stats["examples"] += len(result.records)
  stats["objects"] += len(result.labels)
  stats["clipped"] += result.clipped
  stats["reoriented"] += int(result.reoriented)
  for label in result.labels:
    stats["classes"][label] = stats["classes"].get(label, 0) + 1


def merge_stats(items: Iterable[Dict]) -> Dict:
  """Associative merge of stats dicts of one (split, shard); usable as a CombineFn."""
  items = list(items)
  merged = dict(items[0], classes={})
  for key in STAT_COUNTS:
    merged[key] = sum(i[key] for i in items)
  for item in items:
    for name, n in item["classes"].items():
      merged["classes"][name] = merged["classes"].get(name, 0) + n
  merged["classes"] = dict(sorted(merged["classes"].items()))
  return merged


@dataclasses.dataclass
class ShardTask:
  """One (split, shard) and everything needed to write it: its images are those at positions
  [lo, hi) of the runs (plan/runs.py) it names, read here."""
  staging: str                     # the run directory the shard is written into
  split: str
  shard: int
  num_shards: int
  runs: List[Tuple[str, int]]      # (run file, position of its first image), in order
  lo: int
  hi: int
  by_records: bool                 # positions count records (--records-per-shard)
  label_map: Mapping[str, int]
  options: EncodeOptions
  template: str = naming.DEFAULT_SHARD_NAME_TEMPLATE
  read_ahead: int = 0              # read-ahead threads; 0: by where the images are
  remote_images: bool = False


@dataclasses.dataclass
class ShardResult:
  stats: Dict                      # new_stats + add_example, `path` (and `staged`) set
  errors: List[ErrorRecord]


def _create(uri: str):
  if paths.is_remote(uri):
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.create(uri)
  # a buffer of many records: with the default 8 KB, each image-sized record was its own
  # write() and its 12-byte header another
  return open(uri, "wb", buffering=WRITE_BUFFER_BYTES)


def _rename(src: str, dst: str) -> None:
  if paths.is_remote(src):
    from apache_beam.io.filesystems import FileSystems
    FileSystems.rename([src], [dst])
  else:
    os.replace(src, dst)


def _size(uri: str) -> int:
  return paths.size_of(uri) if paths.is_remote(uri) else os.path.getsize(uri)


def write_shard(task: ShardTask) -> ShardResult:
  """Write one shard under a unique hidden name, then rename it to its staging name.

  Images go in shard order (the runs', one per file: plan/shard_plan.sort_partition); one
  image's records stay together. A retried shard rewrites the same bytes under the same name.
  Bad images become errors; only I/O failures of the shard file raise."""
  split, shard, num_shards = task.split, task.shard, task.num_shards
  name = naming.shard_name(split, shard, num_shards)
  final = paths.child(task.staging, name)  # child: checked where it is written
  partial = paths.child(task.staging, f".part-{uuid.uuid4().hex}-{name}")
  stats = new_stats(split, shard, name)
  errors: List[ErrorRecord] = []
  done = progress.ShardCounter(task.staging, name)
  anns = map(packed.unpack, runs.select(task.runs, task.lo, task.hi, task.by_records))
  # read-ahead threads: object stores wait on round trips, local files on little
  # (measured in benchmarks/README.md)
  workers = task.read_ahead or (REMOTE_READ_AHEAD if task.remote_images else LOCAL_READ_AHEAD)
  limit = task.options.max_image_bytes  # larger files are rejected from a stat, unread
  ahead = prefetch(anns, lambda a: fetch_image(a, task.options),
                   lambda a: min(a.size_bytes or 0, limit), workers, READ_AHEAD_BYTES)
  with _create(partial) as f:
    for ann, fetched in ahead:
      result = convert(ann, task.label_map, task.options, fetched)
      done.tick()
      errors.extend(result.errors)
      if result.records is None:
        stats["rejected"] += 1
        continue
      for record in result.records:
        head, tail = framing(record)
        f.write(head)
        f.write(record)
        f.write(tail)
      add_example(stats, result)
  kill_point("shard")  # in the writer process, when there are several
  _rename(partial, final)
  done.close()
  stats["bytes"] = _size(final)
  # The file's final name (--shard-name-template; {count} is known only now). It keeps its
  # unique staging name until the finalize step moves it there.
  named = naming.format_shard_name(task.template, split, shard, num_shards, stats["examples"])
  if named != name:
    stats["path"], stats["staged"] = named, name
  stats["classes"] = dict(sorted(stats["classes"].items()))
  return ShardResult(stats, errors)


# A writer process costs ~0.3 s to start (0.6 s on a busy machine) and converts ~1,400 images
# a second: below this many images per process, starting one does not pay.
MIN_IMAGES_PER_PROCESS = 1000


def processes_for(limit: int, images: int, shards: int, min_images: int) -> int:
  """How many writer processes a run of `images` in `shards` shards uses, at most `limit`;
  1 means writing in the runner's own process."""
  if min_images:
    limit = min(limit, images // min_images)
  return max(1, min(limit, shards))


def local_processes() -> int:
  """Writer processes for the in-process local runner: one per core the process may use."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


class WriterDied(RuntimeError):
  """A shard writer process ended without answering (killed, out of memory)."""


class WriterPool:
  """Shard writer processes: `submit` hands a ShardTask to the next free one.

  Each writer is a plain `python -c` process that imports this module only (0.3 s) and reads
  pickled tasks from its stdin, answering on a pipe of its own (its stdout and stderr stay the
  user's). concurrent.futures.ProcessPoolExecutor was measured first: its workers re-import
  the main module (`beam-tfrecord` imports Beam: +2.5 s per run), fail when that is `<stdin>`,
  and outlive a SIGKILLed run. A writer here sees EOF on stdin when the run's process is gone,
  finishes its shard and exits.
  """

  def __init__(self, processes: int):
    # submit waits while `processes` tasks are queued: a task holds its shard's annotations,
    # and queueing every shard at once kept all of them alive (+50 MB at 20,000 images)
    self._tasks: "queue.Queue" = queue.Queue(maxsize=processes)
    self._threads = [threading.Thread(target=self._feed, name=f"shard-writer-{i}", daemon=True)
                     for i in range(processes)]
    for thread in self._threads:
      thread.start()

  def submit(self, task: ShardTask) -> "concurrent.futures.Future[ShardResult]":
    future: concurrent.futures.Future = concurrent.futures.Future()
    self._tasks.put((task, future))
    return future

  def shutdown(self) -> None:
    for _ in self._threads:
      self._tasks.put(None)
    for thread in self._threads:
      thread.join()

  def _feed(self) -> None:
    """One writer process's thread: start it on the first task, pass it tasks until shutdown."""
    proc, answers = None, None
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
            proc, answers = _start_writer()
          pickle.dump(task, proc.stdin, pickle.HIGHEST_PROTOCOL)
          proc.stdin.flush()
          ok, value = pickle.load(answers)
        except (EOFError, OSError, pickle.UnpicklingError) as e:
          code = proc.poll() if proc is not None else None
          future.set_exception(WriterDied(
              f"a shard writer process died (exit code {code}: killed, or out of memory? try "
              f"fewer --writer-processes) while writing {task.split} shard {task.shard}: "
              f"{type(e).__name__}"))
          if proc is not None:  # reap it and close its pipes; the next task starts a new one
            _stop_writer(proc, answers, kill=True)
          proc = None
          continue
        if ok:
          future.set_result(value)
        else:
          future.set_exception(value)
    finally:
      if proc is not None:
        _stop_writer(proc, answers)


def _stop_writer(proc: subprocess.Popen, answers, kill: bool = False) -> None:
  for closing in (proc.stdin, answers):
    try:
      closing.close()
    except OSError:  # the pipe of a dead writer
      pass
  if kill:
    proc.kill()
  proc.wait()


def _start_writer():
  """A writer process and the file its answers come from."""
  read_fd, write_fd = os.pipe()
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
  try:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from beam_tfrecord.write.shard_writer import serve; "
         "serve(int(sys.argv[1]))", str(write_fd)],
        stdin=subprocess.PIPE, pass_fds=(write_fd,), env=env)
  finally:
    os.close(write_fd)
  return proc, os.fdopen(read_fd, "rb")


def serve(answer_fd: int) -> None:
  """A writer process's loop: ShardTasks from stdin, (ok, ShardResult or exception) to
  `answer_fd`, until stdin ends."""
  import gc
  gc.freeze()  # the imports are never garbage: collections need not walk them again
  answers = os.fdopen(answer_fd, "wb")
  while True:
    try:
      task = pickle.load(sys.stdin.buffer)
    except EOFError:
      return
    try:
      answer = (True, write_shard(task))
    except Exception as e:  # raised in the caller, as it would be without writer processes
      answer = (False, e)
    try:
      data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that does not pickle
      data = pickle.dumps((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))
    answers.write(data)
    answers.flush()
