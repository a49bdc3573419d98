"""readback/views.py: how each schema's records are read for pictures, statistics and the card."""
from __future__ import annotations

import pytest

from beam_tfrecord.readback import views


def test_views_resolve_renames_and_unknown_schema_names():
  manifest = {"schema": "od_api", "features": {
      "img": {}, "xmin": {}, "ymin": {}, "xmax": {}, "ymax": {}, "image/height": {},
      "image/width": {}}, "feature_names": ["image/encoded=img", "image/object/bbox/xmin=xmin",
                                             "image/object/bbox/ymin=ymin",
                                             "image/object/bbox/xmax=xmax",
                                             "image/object/bbox/ymax=ymax"]}
  view = views.resolve(manifest)
  assert view.image == "img" and view.boxes == ("xmin", "ymin", "xmax", "ymax")
  assert view.mask is None and view.class_text is None  # not in this output
  # a schema name this tool does not know is matched by its image feature
  per_object = views.resolve({"schema": "coco_per_object", "features": {
      "image": {}, "bbox": {}, "category_id": {}}})
  assert per_object.box_format == views.PIXEL_XYWH and per_object.class_id == "category_id"
  with pytest.raises(ValueError, match="known schemas"):
    views.resolve({"schema": "audio", "features": {"wave": {}}})
