"""sources/coco/join_pool: a large COCO file's partitions joined by a worker process
(storage/processes.Pool) give what the runner's own join gives, in the same order; a worker
that dies fails the step; the spill is removed either way. And the pool itself: tasks answered
in any process, exceptions raised in the caller."""
from __future__ import annotations

import os
import tempfile

import apache_beam as beam
import pytest
from test_coco_scale import _messy, _spills_left

from beam_tfrecord.records import batches
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.sources import coco
from beam_tfrecord.sources.coco import join_pool
from beam_tfrecord.sources.base import BATCH_IMAGES
from beam_tfrecord.storage import processes


def _outputs(path: str, include_masks: bool, **kwargs) -> list:
  """_JoinFile's outputs on one file, as comparable text: (tag, repr) in the order given."""
  join = coco._JoinFile(False, drop_background=True, include_masks=include_masks,
                        partitions=97, buffer_bytes=8 << 10, **kwargs)
  out = []
  for o in join.process(("train", path, os.path.dirname(path))):
    if isinstance(o, beam.pvalue.TaggedOutput):
      out.append((o.tag, repr(o.value)))
    else:  # a batch of images (records/batches)
      assert 0 < len(o) <= BATCH_IMAGES
      out += [("images", repr(image)) for image in o]
  return out


@pytest.fixture
def spill_root(tmp_path, monkeypatch):
  root = tmp_path / "spill-root"
  root.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(root))
  return root


@pytest.mark.parametrize("include_masks", [False, True])
def test_the_join_in_a_worker_process_gives_the_runners_join(tmp_path, spill_root,
                                                             include_masks, monkeypatch):
  """Images (their objects, segmentations, areas, ids beyond 64 bits) and errors (unknown
  images and categories, duplicate ids), in the same order per output."""
  path = str(tmp_path / "messy.json")
  _messy(path)
  started, start = [], processes._start
  monkeypatch.setattr(processes, "_start", lambda f: started.append(f) or start(f))
  here = _outputs(path, include_masks)
  assert started == []
  pooled = _outputs(path, include_masks, processes=1, pool_min_bytes=0)
  assert started == ["beam_tfrecord.sources.coco.join_pool:join_partition"]
  by_tag = lambda out, tag: [text for t, text in out if t == tag]
  for tag in ("images", "errors", "categories", "layouts"):
    assert by_tag(pooled, tag) == by_tag(here, tag), tag
  assert len(by_tag(here, "images")) > 2900 and len(by_tag(here, "errors")) > 30
  assert _spills_left(spill_root) == []


def test_a_small_file_is_joined_on_the_runners_thread(tmp_path, spill_root, monkeypatch):
  path = str(tmp_path / "messy.json")
  _messy(path, n=300)
  started = []
  monkeypatch.setattr(processes, "_start", lambda *a: started.append(a))
  out = _outputs(path, False, processes=1)  # under join_pool.MIN_FILE_BYTES
  assert started == [] and sum(t == "images" for t, _ in out) == 300


def test_a_dead_join_process_fails_the_step_and_the_spill_goes(tmp_path, spill_root,
                                                               monkeypatch):
  path = str(tmp_path / "messy.json")
  _messy(path, n=1500)
  monkeypatch.setenv("BEAM_TFRECORD_KILL_AT", "join")  # the worker's kill point (SIGKILL)
  join = coco._JoinFile(False, drop_background=True, partitions=31, buffer_bytes=4 << 10,
                        processes=1, pool_min_bytes=0)
  with pytest.raises(processes.ProcessDied, match="died .* the join of .*messy.json"):
    list(join.process(("train", path, str(tmp_path))))
  assert _spills_left(spill_root) == []


def test_join_partition_answers_plain_images_and_errors(tmp_path, spill_root):
  """One task, in this process: the partition's images as marshal'd plain tuples, given as
  batches of at most BATCH_IMAGES (records/batches), its errors as records."""
  path = str(tmp_path / "messy.json")
  _messy(path, n=400)
  buffer = coco._JoinBuffer(5, buffer_bytes=1 << 40)
  join = coco._JoinFile(False, drop_background=True)
  join._buffered, join._zero_used, join._zero_defined = 0, None, []  # as process() begins
  names = {}
  for out in join._parse_all(path, "train", str(tmp_path), buffer):
    if out.tag == "categories":
      names[out.value[0]] = out.value[1]
  spilled = buffer.spilled()
  try:
    images, errors = [], []
    for p in range(5):
      task = join_pool.JoinTask(*spilled, p, path, "train", str(tmp_path), names, False, False,
                                None)
      found = list(join_pool.in_processes(_Inline(), [task], size=30))
      assert all(0 < len(o) <= 30 for o in found if isinstance(o, list))
      images += [a for o in found if isinstance(o, list) for a in batches.annotations(o)]
      errors += [o for o in found if isinstance(o, ErrorRecord)]
    assert len(images) == 400 and {e.reason for e in errors} >= {"unknown_image_id"}
    assert all(a.split == "train" and a.source == path for a in images)
  finally:
    buffer.close()


class _Inline:
  """A pool that answers in this process."""

  def submit(self, task):
    import concurrent.futures
    future = concurrent.futures.Future()
    future.set_result(join_pool.join_partition(task))
    return future


def test_the_pool_answers_in_its_processes_and_raises_their_exceptions():
  pool = processes.Pool(2, "os:getpid", eager=True)
  try:
    # os.getpid takes no task: a TypeError from the worker, raised here
    with pytest.raises(TypeError):
      pool.submit(None).result(timeout=60)
  finally:
    pool.shutdown()
  pool = processes.Pool(2, "os.path:basename")
  try:
    futures = [pool.submit(f"/a/b{i}") for i in range(6)]
    assert [f.result(timeout=60) for f in futures] == [f"b{i}" for i in range(6)]
  finally:
    pool.shutdown()
