"""records/packed.py: what the shard writer is given, an ImageAnnotation as bytes with its
routing in front."""
from __future__ import annotations

from conftest import SAMPLE_ANNOTATION as ANN

from beam_tfrecord.records.model import Box, ObjectAnnotation


def test_packed_records_carry_the_whole_annotation():
  """packed.pack: routing fields in front, the annotation as bytes the writer unpacks equal."""
  from beam_tfrecord.records import packed
  with_mask = ANN.replace(objects=ANN.objects + (ObjectAnnotation(
      "cat", Box(0.1, 0.2, 0.3, 0.4, normalized=True), segmentation="[[1,2,3,4,5,6]]",
      mask=b"\x89PNG", id=2 ** 40),), labels=("a", "b"))
  for ann in (ANN, with_mask):
    p = packed.pack(ann, records=3)
    assert (p[packed.SPLIT], p[packed.KEY], p[packed.URI], p[packed.SOURCE],
            p[packed.SOURCE_ID], p[packed.SIZE], p[packed.RECORDS]) == (
                ann.split, ann.key, ann.uri, ann.source, ann.source_id, ann.size_bytes, 3)
    assert isinstance(p[packed.BLOB], bytes)
    assert packed.unpack(p[packed.BLOB]) == ann
    assert p[packed.HASH] == packed.identity_hash(ann.key) < 2**64
