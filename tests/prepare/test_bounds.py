"""prepare/bounds: the backstop of sources.base.MAX_OBJECTS_PER_IMAGE for a format that does
not bound its images itself, checked where every image passes (PrepareImages' locate step),
on Beam's in-process runner."""
from __future__ import annotations

import copy

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord.prepare.locate import PrepareImages
from beam_tfrecord.records import batches
from beam_tfrecord.records.model import Box, ErrorRecord, ImageAnnotation, ObjectAnnotation
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE as BOUND
from beam_tfrecord.sources.base import batch_images


def _image(name: str, objects: int) -> ImageAnnotation:
  box = ObjectAnnotation("cat", Box(1.0, 2.0, 3.0, 4.0))
  return ImageAnnotation(key=name, uri=f"/d/{name}", source_id=name, source="/d/a.json",
                         objects=(box,) * objects, split="train", size_bytes=10)


def test_an_image_over_the_bound_becomes_one_error_the_rest_passes():
  full, empty = _image("full.jpg", BOUND), _image("empty.jpg", 0)
  with beam.Pipeline("FnApiRunner") as p:
    located, errors = (p | beam.Create([batches.of([full, _image("big.jpg", BOUND + 1), empty])])
                       | PrepareImages(None))
    assert_that(located, equal_to([batches.of([full, empty])]), label="Images")
    assert_that(errors | beam.Map(ErrorRecord.to_json), equal_to([
        ErrorRecord(source="/d/a.json", stage="parse", reason="too_many_objects",
                    key="big.jpg", level="image",
                    message=f"big.jpg has {BOUND + 1:,} objects, more than the {BOUND:,} one "
                    "image may have: the image is not converted").to_json()]),
        label="Errors")


def test_locate_batch_keeps_the_order_and_reports_each_lost_image(tmp_path):
  """prepare/locate.locate_batch, without Beam: sizes from the source or a stat (or, remote,
  looked up concurrently), hash splits with fractions, one error per lost image."""
  from beam_tfrecord.prepare import splitting
  from beam_tfrecord.prepare.locate import locate_batch
  (tmp_path / "b.jpg").write_bytes(b"12345")
  seen = _image("seen.jpg", 1)  # its source gave a size: no stat
  stat = ImageAnnotation(key="b.jpg", uri=str(tmp_path / "b.jpg"), source_id="b", source="s",
                         split="val")
  lost = ImageAnnotation(key="c.jpg", uri=str(tmp_path / "c.jpg"), source_id="c", source="s")
  batch = batches.of([seen, _image("big.jpg", BOUND + 1), stat, lost])
  images, errors = locate_batch(batch, None)
  assert batches.annotations(images) == [seen, stat.replace(size_bytes=5, split="val")]
  assert images[0] is batch[0]  # nothing to change: the image's own tuple goes on
  assert [(e.key, e.reason) for e in errors] == [("big.jpg", "too_many_objects"),
                                                ("c.jpg", "missing_image")]
  images, errors = locate_batch(batches.of([lost, stat]), None, remote=True)  # all looked up
  assert batches.annotations(images) == [stat.replace(size_bytes=5)]
  assert [e.key for e in errors] == ["c.jpg"]
  fractions = {"train": 0.5, "val": 0.5}
  images, _ = locate_batch(batches.of([seen, stat]), fractions)
  assert [a.split for a in batches.annotations(images)] == [
      splitting.split_for_key(a.key, fractions) for a in (seen, stat)]
  lost_only = batches.of([lost])
  images, _ = locate_batch(batches.of([lost.replace(split=None, size_bytes=7)]), None)
  assert batches.annotations(images) == [lost.replace(split="train", size_bytes=7)]
  assert lost_only == batches.of([lost])  # the batch given is not changed


def test_batches_are_typed_so_beam_sizes_them_without_pickling():
  """Beam samples element sizes for its metrics; an untyped batch of 1,000 images was sized by
  pickling every image in it (~12 ms a sampled batch). Typed (records/batches.ImageBatch), a
  batch's coder is a list of FastPrimitivesCoder, whose tuples, strings and numbers are coded
  in C: sizing one pickles nothing (its fallback coder, here one that fails, is never asked).
  The source here is untyped, as most formats' joins are."""
  from apache_beam import coders as beam_coders
  from beam_tfrecord import pipeline  # noqa: F401 registers the records' coders, as a run does

  class NoPickle(beam_coders.Coder):
    def encode(self, value):
      raise AssertionError(f"pickled: {value!r}")

  p = beam.Pipeline("FnApiRunner")
  images = p | beam.Create([_image("a.jpg", 1)]) | beam.Map(copy.copy)  # untyped (Any)
  formed = images | "Batch" >> batch_images()  # as registry.read batches a source's
  located, _ = formed | PrepareImages(None)
  batch = batches.of([_image("a.jpg", 1)] * 1000)
  for pcoll in (formed, located):  # the batches formed, and the located ones
    coder = beam_coders.registry.get_coder(pcoll.element_type)
    assert isinstance(coder, beam_coders.ListCoder), coder
    assert isinstance(coder.value_coder(), beam_coders.FastPrimitivesCoder), coder
    assert coder.estimate_size(batch) < 300_000  # ~256 an image
  strict = beam_coders.ListCoder(beam_coders.FastPrimitivesCoder(fallback_coder=NoPickle()))
  assert strict.decode(strict.encode(batch)) == batch


def _applied(p):
  """Every applied transform of pipeline `p`, composites' parts included."""
  found = []

  class Visitor(beam.pipeline.PipelineVisitor):
    def enter_composite_transform(self, node):
      found.append(node)

    def visit_transform(self, node):
      found.append(node)

  p.visit(Visitor())
  return found
