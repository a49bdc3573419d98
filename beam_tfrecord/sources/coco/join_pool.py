"""The COCO join of one annotation file's partitions, in order: on the runner's thread
(`joined`), or in a worker process (`join_partition`, through storage/processes.Pool).

The in-process runner runs the whole front half (scan, join, locate, pack, spill) on one
thread while the second core idles until the writers start. Once _JoinFile has scanned a large
file into its spill, the join of each partition (read the partition, make each image's
tuple, check its path: ~16 us an image at 200,000 small images, a third of the
front half) goes to a worker process, and the runner's thread meets the joined images with
locate, pack and spill while the worker joins the next partition. The worker's plain tuples
are the runner's batches as they come (records/batches: no image is rebuilt on the runner's
thread). Same images, same errors, in the same order as the runner's own join. Beam-free: the
worker imports this module and the join's, not Beam.
"""
from __future__ import annotations

import collections
import marshal
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple, Union

from beam_tfrecord.records import batches
from beam_tfrecord.records.batches import ImageBatch
from beam_tfrecord.records.keypoints import KeypointLayout
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.sources.base import BATCH_IMAGES
from beam_tfrecord.sources.coco.buffer import _JoinBuffer
from beam_tfrecord.sources.coco.join import join_found
from beam_tfrecord.storage.layout import kill_point

# A file at least this large is joined in a worker process when the runner offers one: the
# process costs ~0.2 s of CPU to start (on the idle core, while the file is scanned) and
# takes ~16 us an image off the runner's thread: below ~50,000 images it does not pay.
MIN_FILE_BYTES = 16 << 20
# partitions handed out at once: the one the worker joins while the runner's thread gives the
# one before, and one queued (a partition's results: at most ~1 MB, PARTITION_BYTES of the
# file); memory stays O(partition)
AHEAD = 2



class JoinTask(NamedTuple):
  """One partition of a file's spilled _JoinBuffer (spilled()) and what its join needs."""
  directory: str
  partitions: int
  written: frozenset
  partition: int
  uri: str
  split: Optional[str]
  image_root: str
  categories: Dict[Tuple[str, int], str]
  allow_absolute: bool
  follow_symlinks: bool
  layouts: Optional[Dict[str, KeypointLayout]]


def joined(images: Dict[int, List[Tuple]], objects: Dict[int, List[Tuple]], uri: str,
           split: Optional[str], image_root: str, categories: Dict[Tuple[str, int], str],
           allow_absolute: bool, follow_symlinks: bool,
           layouts: Optional[Dict[str, KeypointLayout]]
           ) -> Iterator[Union[Tuple, ErrorRecord]]:
  """join_found of every image of one partition (_JoinBuffer.partition), then the errors of
  the objects whose image is unknown."""
  for image_id, found in images.items():
    yield from join_found(uri, image_id, [(split, image_root, *f) for f in found],
                          objects.pop(image_id, []), categories, allow_absolute,
                          follow_symlinks, layouts)
  for image_id, kept in objects.items():
    yield from join_found(uri, image_id, [], kept, categories, allow_absolute, follow_symlinks)


def join_partition(task: JoinTask) -> Tuple[bytes, List[ErrorRecord]]:
  """A worker process's task: the partition's images, as one marshal dump of their plain
  tuples (records/batches: the pipeline's batches are lists of them), and its errors."""
  kill_point("join")  # in the worker process
  buffer = _JoinBuffer.reading(task.directory, task.partitions, task.written)
  images, objects = buffer.partition(task.partition)
  found: List[Tuple] = []
  errors: List[ErrorRecord] = []
  for out in joined(images, objects, task.uri, task.split, task.image_root, task.categories,
                    task.allow_absolute, task.follow_symlinks, task.layouts):
    if type(out) is ErrorRecord:
      errors.append(out)
    else:
      found.append(out)
  return marshal.dumps(found), errors


def in_processes(pool, tasks: Iterable[JoinTask], size: int = BATCH_IMAGES
                 ) -> Iterator[Union[ImageBatch, ErrorRecord]]:
  """The outputs of join_partition for each task, in the tasks' order: each partition's
  images in batches of at most `size` (its plain tuples are a batch's, records/batches: no
  image is made here), then its errors. AHEAD partitions are handed to `pool`
  (storage/processes.Pool) before the one being given."""
  tasks = iter(tasks)
  pending: collections.deque = collections.deque()
  try:
    for task in tasks:  # one in the process, the others queued (submit does not wait)
      pending.append(pool.submit(task))
      if len(pending) == AHEAD:
        break
    while pending:
      blob, errors = pending.popleft().result()
      task = next(tasks, None)
      if task is not None:
        pending.append(pool.submit(task))
      found = marshal.loads(blob)
      for start in range(0, len(found), size):
        yield found[start:start + size]
      yield from errors
  finally:
    for future in pending:  # the caller stopped early: what is still queued is not started
      future.cancel()
