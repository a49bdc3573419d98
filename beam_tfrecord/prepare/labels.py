"""BuildLabelMap: the run's {class name: id}, one small side input."""
from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional, Tuple

import apache_beam as beam

from beam_tfrecord.prepare import label_map as label_maps
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
  """

  def __init__(self, source: SourceOutput, user_map: Optional[Mapping[str, int]],
               first_id: int = 1):
    super().__init__()
    self.source, self.user_map = source, user_map
    self.first_id = first_id

  def expand(self, root):
    if self.user_map is not None:
      return root | "Given" >> beam.Create([dict(self.user_map)])
    if self.source.categories is not None:
      return (self.source.categories
              | "Categories" >> beam.combiners.ToList()
              | "FromCategories" >> beam.Map(_coco_label_map))
    first_id = self.first_id
    return (self.source.images
            | "Names" >> beam.FlatMap(lambda a: [o.label for o in a.objects] + list(a.labels))
            | "Distinct" >> beam.Distinct()
            | "AllNames" >> beam.combiners.ToList()
            | "Number" >> beam.Map(label_maps.from_names, first_id))
