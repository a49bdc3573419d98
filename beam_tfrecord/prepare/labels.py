"""BuildLabelMap: the run's {class name: id}, one small side input."""
from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional, Tuple

import apache_beam as beam

from beam_tfrecord.records import batches
from beam_tfrecord.records import label_map as label_maps
from beam_tfrecord.prepare.class_selection import renumber
from beam_tfrecord.sources.base import SourceOutput


def _coco_label_map(pairs: Iterable[Tuple[str, int]]) -> Dict[str, int]:
  """COCO keeps its category ids; a name with two ids keeps the smallest."""
  result: Dict[str, int] = {}
  for name, category_id in sorted(set(pairs), key=lambda p: (p[1], p[0])):
    result.setdefault(name, category_id)
  return result


class BuildLabelMap(beam.PTransform):
  """Source output -> singleton PCollection[{name: id}].

  A user's label_map.pbtxt wins; else the source's ids (COCO category ids, YOLO's class
  order, class folders); else sorted names (of objects and image-level labels) numbered
  from `first_id` (1 for the TF OD API, where 0 is background; 0 for classification).
  `contiguous` (--classes/--class-map): the source's categories numbered afresh from
  `first_id` in their id order, so that a subset or a merge leaves no gap.
  """

  def __init__(self, source: SourceOutput, user_map: Optional[Mapping[str, int]],
               first_id: int = 1, contiguous: bool = False):
    super().__init__()
    self.source, self.user_map = source, user_map
    self.first_id, self.contiguous = first_id, contiguous

  def expand(self, root):
    if self.user_map is not None:
      return root | "Given" >> beam.Create([dict(self.user_map)])
    if self.source.categories is not None:
      first_id = self.first_id
      number = ((lambda pairs: renumber(pairs, first_id)) if self.contiguous
                else _coco_label_map)
      return (self.source.categories
              | "Categories" >> beam.combiners.ToList()
              | "FromCategories" >> beam.Map(number))
    first_id = self.first_id
    return (self.source.images
            | "Names" >> beam.FlatMap(batches.class_names)
            | "Distinct" >> beam.Distinct()
            | "AllNames" >> beam.combiners.ToList()
            | "Number" >> beam.Map(label_maps.from_names, first_id))
