"""What the sources with keypoints share (COCO, YOLO, CVAT): each annotation file's keypoint
layout (records/keypoints.py), checked to be one for the whole dataset, and the SourceOutput
that carries it on to the manifest and the card."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.keypoints import KeypointLayout, differing
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.sources.base import SourceOutput


def _described(layout: Optional[KeypointLayout]) -> str:
  if layout is None:
    return "no keypoints"
  shown = ", ".join(layout.names[:6]) + (", ..." if layout.size > 6 else "")
  return f"{layout.size} keypoints ({shown})"


def _differ(found: Sequence[Tuple[str, Optional[KeypointLayout]]]) -> List[ErrorRecord]:
  first, files = differing(found)
  first_uri = next((uri for uri, layout in sorted(found, key=lambda u: u[0])
                    if layout == first), "")
  return [ErrorRecord(
      source=uri, stage="parse", reason="keypoints_differ", key=uri, level="file",
      message=f"the file defines {_described(dict(found)[uri])}, {first_uri} "
      f"{_described(first)}: the records of one dataset need one layout of keypoints")
      for uri in files]


class DatasetLayout(beam.PTransform):
  """PCollection[(annotation file, its KeypointLayout or None)] -> (PCollection of the
  dataset's layout: that of the first file, in name order, with one; none without keypoints,
  PCollection[ErrorRecord]: keypoints_differ for each file whose layout is another). Largest
  element: the list of every file's layout, O(annotation files x keypoints)."""

  def expand(self, layouts):
    listed = layouts | "AllLayouts" >> beam.combiners.ToList()
    dataset = listed | "DatasetLayout" >> beam.FlatMap(
        lambda found: [layout for layout in [differing(found)[0]] if layout is not None])
    return dataset, listed | "LayoutsDiffer" >> beam.FlatMap(_differ)


def source_output(images, errors, categories=None, layouts=None) -> SourceOutput:
  """The SourceOutput of a source whose files have keypoint layouts ((uri, layout) pairs):
  its errors with keypoints_differ's, and the dataset's layout as `keypoints` (for the
  manifest and the card)."""
  if layouts is None:
    return SourceOutput(images=images, errors=errors, categories=categories)
  dataset, differ = layouts | "KeypointLayout" >> DatasetLayout()
  errors = (errors, differ) | "WithLayoutErrors" >> beam.Flatten()
  return SourceOutput(images=images, errors=errors, categories=categories, keypoints=dataset)
