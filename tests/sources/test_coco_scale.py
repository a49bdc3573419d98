"""sources/coco.py at scale: the launcher reads at most the head of an annotation file
(LAUNCH_HEAD_BYTES); category id 0 in use is the workers' finding (category_zero), which fails
the run (finalize/manifest.USAGE_REASONS); _JoinFile joins in bounded memory, spilling images
and objects by partition of image id (_JoinBuffer over storage.spill) and joining one
partition at a time, with the records of the distributed join."""
from __future__ import annotations

import json
import os
import random
import tempfile
import types

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.test_pipeline import TestPipeline
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.records import batches
from beam_tfrecord.errors import UsageError
from beam_tfrecord.finalize.manifest import OUTCOMES, USAGE_REASONS, outcome_of
from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources.coco.scan import _NotStreamable
from beam_tfrecord.sources import coco
from beam_tfrecord.sources import detect as detection

# =============================================================================================
# The launcher reads the head only
# =============================================================================================


class _Counted:
  """A file whose reads are added up in `total` (a one-item list)."""

  def __init__(self, f, total):
    self._f, self._total = f, total

  def read(self, *args):
    data = self._f.read(*args)
    self._total[0] += len(data)
    return data

  def readline(self, *args):
    data = self._f.readline(*args)
    self._total[0] += len(data)
    return data

  def __iter__(self):
    return iter(self.readline, b"")

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._f.close()

  def __getattr__(self, name):
    return getattr(self._f, name)


@pytest.fixture
def bytes_read(monkeypatch):
  """[bytes read through FileSystems.open or storage.files.open_local] (every read of an
  input: storage.files.head, check_input, detect) and open() in binary mode."""
  from beam_tfrecord.storage import files
  total = [0]
  real_open = FileSystems.open
  monkeypatch.setattr(FileSystems, "open",
                      lambda *a, **k: _Counted(real_open(*a, **k), total))
  real_local = files.open_local
  monkeypatch.setattr(files, "open_local",
                      lambda *a, **k: _Counted(real_local(*a, **k), total))
  import builtins
  real_builtin = builtins.open

  def counted_open(file, mode="r", *a, **k):
    f = real_builtin(file, mode, *a, **k)
    return _Counted(f, total) if "b" in mode and "r" in mode and isinstance(file, str) and \
        file.endswith(".json") else f
  monkeypatch.setattr(builtins, "open", counted_open)
  return total


def _big(path, images_first: bool, size: int = 20 << 20) -> str:
  """A COCO file of `size` bytes or more whose only annotation uses category 0, at the end.
  images_first: the `images` array opens the file (padded with images); else an `info`
  string of `size` bytes comes first, so that `images` starts past the head."""
  pad = size // 60
  images = [{"id": i, "file_name": f"img-{i:09d}.jpg", "width": 64, "height": 48}
            for i in range(pad if images_first else 1)]
  doc = {"images": images} if images_first else {"info": "x" * size, "images": images}
  doc["annotations"] = [{"id": 1, "image_id": 0, "category_id": 0, "bbox": [1, 2, 3, 4]}]
  doc["categories"] = [{"id": 0, "name": "cells"}]
  with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f)
  assert os.path.getsize(path) >= size
  return str(path)


@pytest.mark.parametrize("images_first", [True, False], ids=["images_first", "info_first"])
def test_the_launcher_reads_at_most_the_head_of_a_20_mb_file(tmp_path, bytes_read,
                                                             images_first):
  path = _big(tmp_path / "big.json", images_first)
  coco.check(types.SimpleNamespace(inputs=[path], label_map=None))  # no category-0 scan
  checked = bytes_read[0]
  assert 0 < checked <= coco.LAUNCH_HEAD_BYTES + 4096  # + the sniffed first 4 kB
  # --format auto: `images` past the head is not seen (give --format coco)
  assert coco.detect(path) == ("COCO JSON" if images_first else None)
  assert 0 < bytes_read[0] - checked <= coco.LAUNCH_HEAD_BYTES
  before = bytes_read[0]
  if images_first:
    assert detection.detect([path]).format == "coco"  # asks every format
  else:
    with pytest.raises(UsageError, match="cannot tell the format"):
      detection.detect([path])
  assert bytes_read[0] - before <= 5 * (coco.LAUNCH_HEAD_BYTES + (64 << 10))


def test_the_head_still_refuses_what_it_can_see(tmp_path, bytes_read):
  """Inside the head: a JSON list, an empty `images`, a complete object without `images`
  are refused at launch as before; a head that ends before `images` is left to the workers."""
  cases = {"list.json": "[1, 2]", "empty.json": '{"images": [], "annotations": []}',
           "none.json": '{"annotations": [], "categories": []}'}
  for name, text in cases.items():
    (tmp_path / name).write_text(text)
    with pytest.raises(UsageError, match=name):
      coco.check_input(str(tmp_path / name))
  late = tmp_path / "late.json"
  late.write_text('{"info": "%s", "categories": []}' % ("x" * coco.LAUNCH_HEAD_BYTES))
  coco.check_input(str(late))  # no `images` seen in the head: the workers say so


def test_category_zero_used_is_a_usage_outcome_whatever_else_happened():
  totals = {"examples": 5, "images": 5, "objects": 9}
  reasons = {coco.CATEGORY_ZERO_USED: 2, "unknown_category_id": 4}
  for lost, examples in (("", 5), ("split train: 6 planned", 5), ("", 0)):
    outcome, status = outcome_of({**totals, "examples": examples}, {"file": 2, "object": 4},
                                 0.4, 0.0, lost, ["val"], reasons)
    assert (outcome, OUTCOMES[outcome]) == ("usage", 2)
    assert status == ("failed: " + USAGE_REASONS[coco.CATEGORY_ZERO_USED] +
                      " (see the category_zero_used errors in errors-*.jsonl)")
  assert "--label-map" in status
  assert outcome_of(totals, {}, 0.0, None, "", [], {"background_category": 1}) == ("ok", "ok")


# =============================================================================================
# Category id 0 on the workers, both joins
# =============================================================================================


def _collect(out, out_dir: str) -> None:
  """Write the images (reprs), errors (JSON) and categories (reprs) of a SourceOutput-like
  `out` into out_dir, read back by _collected (files: the runner works on copies)."""
  images = out.images | "Each" >> beam.FlatMap(batches.annotations)  # lists of images
  for kind, pcoll, text in (("images", images, repr),
                            ("errors", out.errors, lambda e: e.to_json()),
                            ("categories", out.categories, repr)):
    _ = (pcoll | f"Text[{kind}]" >> beam.Map(text)
         | f"Write[{kind}]" >> beam.io.WriteToText(os.path.join(out_dir, kind), num_shards=1))


def _collected(out_dir: str) -> dict:
  """{'images': sorted reprs, 'errors': error dicts, 'categories': sorted reprs}."""
  results = {}
  for kind in ("images", "errors", "categories"):
    [found] = [n for n in os.listdir(out_dir) if n.startswith(kind)]
    with open(os.path.join(out_dir, found), encoding="utf-8") as f:
      lines = sorted(f.read().splitlines())
    results[kind] = ([json.loads(line) for line in lines] if kind == "errors" else lines)
  return results


def _run(uri: str, join_in_worker: bool, drop_background: bool = True) -> dict:
  """ReadCoco's records on one file (_collected)."""
  out_dir = tempfile.mkdtemp(dir=os.path.dirname(uri))
  with TestPipeline("FnApiRunner") as p:
    _collect(p | coco.ReadCoco([("train", uri, os.path.dirname(uri))],
                               drop_background=drop_background,
                               join_in_worker=join_in_worker), out_dir)
  return _collected(out_dir)


@pytest.mark.e2e
@pytest.mark.parametrize("join_in_worker", [True, False], ids=["join_file", "per_section"])
def test_workers_fail_a_file_using_category_zero_and_warn_of_an_unused_one(tmp_path,
                                                                           join_in_worker):
  # the workers read every byte whatever the launcher's head saw (past the head end to end:
  # tests/e2e/test_coco_scale_category_zero.py): 2,000 images put the use far from the start
  path = _big(tmp_path / "used.json", images_first=True, size=120_000)
  found = _run(path, join_in_worker)
  images, errors, categories = found["images"], found["errors"], found["categories"]
  assert len(images) == 120_000 // 60
  zero = [e for e in errors if e["reason"] == coco.CATEGORY_ZERO_USED]
  assert zero == [{"key": path, "level": "file", "reason": coco.CATEGORY_ZERO_USED,
                   "source": f"{path}#annotations[0]", "stage": "parse",
                   "message": USAGE_REASONS[coco.CATEGORY_ZERO_USED]}]
  assert {e["reason"] for e in errors} == {coco.CATEGORY_ZERO_USED, "unknown_category_id"}
  assert categories == []

  doc = json.load(open(path))
  doc["annotations"][0]["category_id"] = 1
  doc["categories"].append({"id": 1, "name": "rbc"})
  with open(path, "w") as f:
    json.dump(doc, f)
  found = _run(path, join_in_worker)
  errors, categories = found["errors"], found["categories"]
  assert [(e["reason"], e["level"], e["source"]) for e in errors] == [
      ("background_category", "warning", f"{path}#categories[0]")]
  assert categories == [repr(("rbc", 1))]
  found = _run(path, join_in_worker, drop_background=False)  # given a --label-map
  assert found["errors"] == [] and found["categories"] == [repr(("cells", 0)), repr(("rbc", 1))]


# =============================================================================================
# _JoinFile: bounded memory
# =============================================================================================


def _messy(path, n: int = 3000, seed: int = 7) -> dict:
  """A COCO document with n images (ids strided, negative, beyond 64 bits), 0..5 objects each
  in shuffled order, duplicate image ids, objects of unknown images, unknown categories,
  segmentations, areas, crowds and ids missing; written to `path`. Returns the document."""
  rng = random.Random(seed)
  ids = [i * 64 for i in range(n - 3)] + [-5, 2 ** 70, 2 ** 63 - 1]  # strided: one residue
  images = [{"id": i, "file_name": f"d{k % 7}/img-{k}.jpg", "width": 64 + k % 5, "height": 48}
            for k, i in enumerate(ids)]
  images += [{"id": ids[k], "file_name": f"dup-{k}.jpg"} for k in range(0, n, 97)]
  annotations = []
  for image_id in ids + [123456789, 2 ** 65]:  # the last two: unknown images
    for _ in range(rng.randrange(6)):
      ann = {"id": len(annotations) + 1, "image_id": image_id,
             "category_id": rng.choice([1, 2, 3, 99]),
             "bbox": [rng.randrange(50), rng.random() * 10, rng.randrange(1, 9), 2.5]}
      if rng.random() < 0.2:
        ann["area"] = rng.random() * 100
      if rng.random() < 0.1:
        ann["iscrowd"] = 1
      if rng.random() < 0.05:
        del ann["id"]
      if rng.random() < 0.05:
        ann["id"] = 2 ** 66 + len(annotations)  # not packable
      if rng.random() < 0.1:
        ann["segmentation"] = [[1, 2, 5, 2, 5, 6]]
      annotations.append(ann)
  rng.shuffle(annotations)
  doc = {"images": images, "annotations": annotations,
         "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"},
                        {"id": 3, "name": "eel"}]}
  with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f)
  return doc


def _join_file(uri: str, include_masks: bool, **kwargs) -> dict:
  """_JoinFile's records on one file, in a pipeline (_collected)."""
  out_dir = tempfile.mkdtemp(dir=os.path.dirname(uri))
  with TestPipeline("FnApiRunner") as p:
    out = (p | beam.Create([("train", uri, os.path.dirname(uri))])
           | beam.ParDo(coco._JoinFile(False, drop_background=True, include_masks=include_masks,
                                       **kwargs)).with_outputs("categories", "errors",
                                                               main="images"))
    _collect(out, out_dir)
  return _collected(out_dir)


@pytest.fixture
def spill_root(tmp_path, monkeypatch):
  """The folder the spill's temporary directories go to, and the flushes made."""
  root = tmp_path / "spill-root"
  root.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(root))
  flushes = []
  real_flush = coco._JoinBuffer.flush

  def flush(self):
    real_flush(self)
    flushes.append(sorted(os.listdir(self.spill.directory)))
  monkeypatch.setattr(coco._JoinBuffer, "flush", flush)
  return root, flushes


def _spills_left(root) -> list:
  return [n for n in os.listdir(root) if n.startswith("beam-tfrecord-spill-")]


@pytest.mark.e2e
@pytest.mark.parametrize("include_masks", [False, True])
def test_the_spilled_join_gives_every_image_and_object_of_the_distributed_join(
    tmp_path, spill_root, include_masks):
  path = str(tmp_path / "messy.json")
  doc = _messy(path)
  root, flushes = spill_root
  joined = _join_file(path, include_masks, partitions=97, buffer_bytes=8 << 10)
  assert len(flushes) > 20 and max(len(f) for f in flushes) > 150  # it spilled, partitioned
  assert _spills_left(root) == []

  # the reference: the distributed join, which gave the old in-memory _JoinFile's records
  reference = tempfile.mkdtemp(dir=str(tmp_path))
  with TestPipeline("FnApiRunner") as p:
    _collect(p | coco.ReadCoco([("train", path, str(tmp_path))], drop_background=True,
                               include_masks=include_masks, join_in_worker=False), reference)
  expected = _collected(reference)
  assert (joined["images"], joined["errors"]) == (expected["images"], expected["errors"])
  assert [eval(c)[0][1] for c in joined["categories"]] == [1, 2, 3]  # ((uri, id), name)

  # and from the document itself: every image once, its objects in file order
  flushes.clear()
  direct = list(coco._JoinFile(False, drop_background=True, include_masks=include_masks,
                               partitions=97, buffer_bytes=8 << 10).process(
                                   ("train", path, str(tmp_path))))
  assert len(flushes) > 20 and _spills_left(root) == []
  got = {a.source_id: a for a in _images(direct)}
  assert sorted(repr(a) for a in got.values()) == joined["images"]
  names = {c["id"]: c["name"] for c in doc["categories"]}
  entries = {}
  for image in doc["images"]:
    entries.setdefault(image["id"], []).append(image)
  annotations = {}
  for ann in doc["annotations"]:
    annotations.setdefault(ann["image_id"], []).append(ann)
  assert sorted(got) == sorted(str(i) for i in entries)
  for image_id, found in entries.items():
    annotation = got[str(image_id)]
    chosen = min(((e["file_name"], e.get("width"), e.get("height")) for e in found),
                 key=lambda t: repr(("train", str(tmp_path), *t)))
    assert (annotation.key, annotation.width, annotation.height) == chosen
    kept = [a for a in annotations.get(image_id, []) if a["category_id"] in names]
    x = lambda a: float(a["bbox"][0])
    assert [(o.label, o.id, o.box.xmin, o.box.ymin, o.box.xmax, o.is_crowd, o.area,
             o.segmentation) for o in annotation.objects] == [
        (names[a["category_id"]], a.get("id"), x(a), float(a["bbox"][1]),
         x(a) + a["bbox"][2], bool(a.get("iscrowd")), a.get("area"),
         json.dumps(a["segmentation"], separators=(",", ":"))
         if include_masks and "segmentation" in a else None)
        for a in kept]
  errors = [o.value for o in direct if isinstance(o, beam.pvalue.TaggedOutput)
            and o.tag == "errors"]
  unknown = [e for e in errors if e.reason == "unknown_image_id"]
  assert len(unknown) == len(annotations[123456789]) + len(annotations[2 ** 65]) > 0
  duplicates = [e for e in errors if e.reason == "duplicate_image_id"]
  assert len(duplicates) == len(range(0, 3000, 97))
  assert sum(e.reason == "unknown_category_id" for e in errors) == sum(
      a["category_id"] == 99 and a["image_id"] in entries for a in doc["annotations"]) > 0
  assert sorted(e.to_json() for e in errors) == sorted(json.dumps(e, ensure_ascii=False,
                                                       sort_keys=True)
                                                       for e in joined["errors"])


def _images(outputs) -> list:
  """The images of _JoinFile's outputs: its untagged outputs are batches (records/batches)."""
  return [a for o in outputs if isinstance(o, list) for a in batches.annotations(o)]


def test_a_file_within_the_buffer_never_touches_the_disk(tmp_path, spill_root):
  path = str(tmp_path / "small.json")
  _messy(path, n=200)
  root, flushes = spill_root
  out = list(coco._JoinFile(False, drop_background=True).process(("train", path, "imgs")))
  assert flushes == [] and os.listdir(root) == []
  assert len(_images(out)) == 200


def test_the_spill_directory_is_removed_when_parsing_fails(tmp_path, spill_root, monkeypatch):
  from beam_tfrecord.sources.coco import workers as coco  # the module that calls the parser
  path = str(tmp_path / "messy.json")
  _messy(path, n=1500)
  root, flushes = spill_root

  def broken(record):  # the categories come last: everything has been spilled by then
    raise RuntimeError("a bug in the parser")
  monkeypatch.setitem(coco._PARSERS, "categories", broken)
  join = coco._JoinFile(False, drop_background=True, partitions=64, buffer_bytes=4 << 10)
  with pytest.raises(RuntimeError, match="a bug in the parser"):
    list(join.process(("train", path, "imgs")))
  assert flushes and _spills_left(root) == []

  # a truncated file is reported, not raised: what was read is joined, the spill removed too
  monkeypatch.undo()
  monkeypatch.setattr(tempfile, "tempdir", str(root))
  text = open(path).read()
  cut = str(tmp_path / "cut.json")
  with open(cut, "w") as f:
    f.write(text[:text.index('"categories"') - 5000])
  out = list(join.process(("train", cut, "imgs")))
  reasons = {o.value.reason for o in out
             if isinstance(o, beam.pvalue.TaggedOutput) and o.tag == "errors"}
  assert "malformed_json" in reasons
  ids = [a.source_id for a in _images(out)]
  # 2 ** 70 is past ijson's 64 bits, and json.load refuses the cut file: the images from there
  # on are in the malformed_json error, as the distributed join and the old join reported them
  assert sorted(ids) == sorted(str(i) for i in [k * 64 for k in range(1497)] + [-5])
  assert _spills_left(root) == []


@pytest.mark.parametrize("flush_every", [0, 1, 7])
def test_join_buffer_gives_back_what_was_added_by_partition(tmp_path, monkeypatch,
                                                            flush_every):
  """Every image and object comes back in its partition, from memory, from the spill files,
  or both; images in the order added, objects too among those of one kind (packed, or not:
  the join orders them by their index)."""
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  rng = random.Random(flush_every)
  buffer = coco._JoinBuffer(13, buffer_bytes=1 << 40)
  images, objects = {}, {}
  ids = [rng.randrange(-10 ** 6, 10 ** 6) for _ in range(400)] + [2 ** 64, -(2 ** 70)]
  for k, image_id in enumerate(ids * 2):
    if k % 3 == 0:
      entry = (f"{k}.jpg", rng.choice([None, 64]), 48)
      buffer.add_image(image_id, *entry)
      images.setdefault(image_id, []).append(entry)
    chunk = (k, rng.choice([1, 2 ** 70]), (1.0, 2.5, 3.0, 4.25), k % 4 == 0,
             rng.choice([None, 3.5]), rng.choice([None, 9, 2 ** 64]),
             rng.choice([None, None, "[[1,2,3,4,5,6]]"]))
    buffer.add_object(image_id, chunk)
    objects.setdefault(image_id, []).append(chunk)
    if flush_every and k % flush_every == 0:
      buffer.flush()
  got_images, got_objects = {}, {}
  for p in range(13):
    part_images, part_objects = buffer.partition(p)
    assert not set(part_images) & set(got_images) and not set(part_objects) & set(got_objects)
    got_images.update(part_images)
    got_objects.update(part_objects)
  assert got_images == images
  by_index = lambda found: {i: sorted(chunks, key=lambda c: c[0]) for i, chunks in found.items()}
  assert by_index(got_objects) == by_index(objects)
  assert got_objects.keys() == objects.keys()
  assert len({((i * coco._MIX) & coco._MASK) * 13 >> 64 for i in ids}) == 13  # all used
  directory = buffer.spill.directory if buffer.spill else None
  buffer.close()
  assert directory is None or not os.path.exists(directory)
  assert (directory is None) == (flush_every == 0)


# --- fast_sections: entries parsed by json's C scanner, the same as stream_sections ---


def _sections(parse, data: bytes, **kwargs):
  """(entries, found, bad reasons, raised): what a section parser gives for `data`."""
  import io
  found, bad, entries, raised = set(), [], [], None
  try:
    for section, entry in parse(io.BytesIO(data), coco.SECTIONS, found=found, bad=bad,
                                **kwargs):
      # an over-deep entry is given as its error (InputError compares by identity)
      entries.append((section, ("rejected", entry.reason) if isinstance(entry, InputError)
                      else entry))
  except Exception as e:  # noqa: BLE001 - compared below
    raised = e
  return entries, found, [(k, e.reason) for k, e in bad], raised


def _assert_same_as_streaming(data: bytes, block: int) -> None:
  fast = _sections(coco.fast_sections, data, block=block)
  slow = _sections(coco.stream_sections, data)
  if isinstance(slow[3], InputError) or isinstance(fast[3], InputError):
    assert (type(fast[3]), getattr(fast[3], "reason", None)) == (
        type(slow[3]), getattr(slow[3], "reason", None)), (fast[3], slow[3], data[:200])
    return
  if slow[3] is None and isinstance(fast[3], _NotStreamable):
    # json's scanner gave up (recursion past its limit): the caller streams the file again
    # with ijson, which skips the entry; what fast gave before is a prefix
    assert fast[0] == slow[0][:len(fast[0])] and b"[" * 900 in data, data[:300]
    return
  if slow[3] is None:
    assert fast == slow, data[:300]
    return
  # ijson stopped (NaN, 1e400, not JSON): the caller goes on from the entries read so far
  # with json.load; fast_sections may stop sooner (a block's numbers are checked up front)
  assert fast[3] is not None, data[:300]
  assert fast[0] == slow[0][:len(fast[0])], data[:300]


_SCALARS = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=False, width=32),
                     st.text(alphabet='ab"\\/é\u2028 []{},:', max_size=6), st.booleans(),
                     st.none())
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(alphabet="abc", max_size=3), inner,
                                                 max_size=4)), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(st.sampled_from(["images", "annotations", "categories", "info", "x"]),
                           st.one_of(st.lists(_VALUES, max_size=5), _VALUES), max_size=5),
       indent=st.sampled_from([None, 0, 2]), block=st.sampled_from([1, 3, 7, 64, 4096]))
def test_fast_sections_read_what_streaming_reads(doc, indent, block):
  _assert_same_as_streaming(json.dumps(doc, indent=indent).encode(), block)


@pytest.mark.parametrize("text", [
    b"", b"  ", b"[]", b"5", b'"x"', b"{}", b"{} x", b'{"images": [1, 2,]}',
    b'{"images": {"a": 1}, "categories": []}', b'{"images": [], "images": [{"id": 1}]}',
    b'{"images": [{"id": NaN}]}', b'{"images": [{"id": 1e400}], "categories": []}',
    b'{"images": [{"id": 12345678901234567890}], "categories": []}',
    b'{"info": ' + b"[" * 40 + b"]" * 40 + b', "images": []}',
    b'{"images": [' + b"[" * 31 + b"]" * 31 + b"]}",
    b'{"images": [' + b"[" * 30 + b"]" * 30 + b"], \"categories\": []}",
    b'{"images": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
    # one entry too deep among good ones: rejected alone, the next entries read
    b'{"annotations": [{"a": 1}, {"b": ' + b"[" * 40 + b"]" * 40 + b'}, {"c": 2}], "images": []}',
    b'{"annotations": [{"b": ' + b"[" * 5000 + b"]" * 5000 + b'}, {"c": 2}], "images": []}',
    b'\xef\xbb\xbf{"images": [], "categories": []}',
    b'{"images": [{"file_name": "\xc3\xa9\\u00e9"}], "categories": [{"id": 1, "name": "a"}]}',
])
@pytest.mark.parametrize("block", [1, 5, 4096])
def test_fast_sections_edge_cases(text, block):
  _assert_same_as_streaming(text, block)


def test_a_number_cut_by_a_block_end_is_read_whole():
  data = json.dumps({"images": [{"id": 123456789, "width": 1.25e-3}],
                     "categories": []}).encode()
  for block in range(1, len(data) + 1):
    assert _sections(coco.fast_sections, data, block=block)[0] == [
        ("images", {"id": 123456789, "width": 1.25e-3})]
  big = b'{"images": [{"id": 1e' + b"4" + b'00}], "categories": []}'
  for block in range(1, len(big) + 1):  # 1e400 straddling any two blocks is still seen
    assert isinstance(_sections(coco.fast_sections, big, block=block)[3], ValueError)


# --- the fast path's number check and its batches (issue 28) ---

_INT_DIGITS = st.integers(1, 25) | st.sampled_from([300, 309, 320])
_NUMBER_TEXT = st.builds(
    lambda sign, lead, more, fraction, exponent: sign + lead + more + fraction + exponent,
    st.sampled_from(["", "-"]), st.sampled_from("123456789"),
    _INT_DIGITS.flatmap(lambda n: st.text("0123456789", min_size=n - 1, max_size=n - 1)),
    st.sampled_from(["", "."]).flatmap(lambda dot: st.just("") if not dot else st.integers(
        1, 45).flatmap(lambda n: st.text("0123456789", min_size=n, max_size=n).map(
            lambda digits: "." + digits))),
    st.sampled_from(["", "e5", "E-7", "e300", "e308", "e309", "E+400", "e-400", "e0001",
                     "e" + "0" * 20 + "1"]))


@settings(max_examples=500, deadline=None)
@given(numbers=st.lists(_NUMBER_TEXT, min_size=1, max_size=4))
def test_the_number_check_flags_exactly_what_ijson_refuses(numbers):
  """Outside strings the check is exact: a number ijson refuses is always flagged (else the
  fast path would read what the strict one stops at), and a number it reads never is (else
  full-precision files would all go back to ijson)."""
  import ijson

  from beam_tfrecord.sources.coco.scan import _ijson_refuses
  data = ("[" + ", ".join(numbers) + "]").encode()
  try:
    list(ijson.items(data, "item", use_float=True))
    refused = False
  except ijson.JSONError:
    refused = True
  assert _ijson_refuses(data) == refused, data


def _full_precision_text(n: int = 400) -> bytes:
  """Boxes, areas and polygons written with 17 and 19 significant digits (repr's and
  '%.19g''s), a quarter of them below 1 (19 fraction digits: 0.3281332813835913200), as
  labelling tools export them."""
  import re
  rng = random.Random(5)
  number = lambda: rng.random() * rng.choice([1, 600, 600, 600])  # noqa: E731
  doc = {"images": [{"id": i, "file_name": f"{i}.jpg", "width": 640, "height": 480}
                    for i in range(n)],
         "annotations": [{"id": i, "image_id": i // 2, "category_id": 1, "iscrowd": 0,
                          "bbox": [number() for _ in range(4)], "area": number(),
                          "segmentation": [[number() for _ in range(16)]]}
                         for i in range(2 * n)],
         "categories": [{"id": 1, "name": "cell"}]}
  count = iter(range(10 ** 9))
  text = re.sub(r"\d+\.\d+(?:e-?\d+)?", lambda m: m.group() if next(count) % 2 else
                f"{float(m.group()):.19g}", json.dumps(doc))
  assert re.search(r"\.\d{19}", text)
  return text.encode()


@pytest.mark.parametrize("block", [64, 4096, 1 << 20])
def test_full_precision_floats_are_read_by_the_fast_path_itself(block):
  """No fallback to ijson for 19-digit fractions (they used to read as integers past 2**63):
  fast_sections gives stream_sections' entries, in batches and one at a time."""
  data = _full_precision_text()
  fast = _sections(coco.fast_sections, data, block=block)
  assert fast[3] is None and fast == _sections(coco.stream_sections, data)
  assert len(fast[0]) == 400 + 800 + 1


@pytest.mark.parametrize("text", [
    # the window's last '},' lies past the array's end: the batch stops at its ']'
    b'{"images": [{"id": 1}, {"id": 2}], "categories": [{"id": 1}, {"id": 2}], "x": 1}',
    b'{"annotations": [{"a": "},"}, {"b": "x\\"},"}, {"c": [{"d": 1}, {"e": 2}]}], "c": 3}',
    b'{"images": [{"id": 1}, 5, [1, 2], {"id": 2}, "s", {"id": 3}], "categories": []}',
    b'{"images": [{"id": 1}, {"id": NaN}, {"id": 3}], "categories": []}',
    b'{"images": [{"id": 1}, {"id": 2}, ], "categories": []}',
    b'{"images": [{"id": 1},{"id": 2},\n {"id": 3}\n ,{"id": 4}], "categories": []}',
    b'{"images": [{"a": ' + b"[" * 28 + b"]" * 28 + b'}, {"id": 2}], "categories": []}',
    b'{"images": [{"a": ' + b"[" * 29 + b"]" * 29 + b'}, {"id": 2}], "categories": []}',
    b'{"images": [{"a": ' + b"[" * 30 + b"]" * 30 + b'}, {"id": 2}], "categories": []}',
    b'{"images": [{"id": 1}, {"id": 12345678901234567890}, {"id": 3}], "categories": []}',
])
@pytest.mark.parametrize("block", [1, 7, 4096])
def test_batches_read_what_streaming_reads(text, block):
  _assert_same_as_streaming(text, block)


_NESTED = st.recursive(st.sampled_from(['x\\"[', "a\\\\", "\u00e9]", "{}", "plain", 1, 2.5, None]),
                       lambda inner: st.lists(inner, max_size=3) |
                       st.dictionaries(st.sampled_from("ab"), inner, max_size=2), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(value=_NESTED, ascii_only=st.booleans(), limit=st.integers(1, 8))
def test_the_byte_depth_check_never_passes_what_nests_deeper(value, ascii_only, limit):
  """A batch of entries is read whole only when _deeper_than is sure that it nests no
  deeper than allowed (escapes dropped; a bracket inside a string makes it unsure)."""
  from beam_tfrecord.sources import depth
  from beam_tfrecord.sources.coco.scan import _deeper_than
  data = json.dumps({"k": value}, ensure_ascii=ascii_only).encode()
  if depth.nests_deeper({"k": value}, limit):
    assert _deeper_than(data, limit), data
