"""A Labelbox export v2 of the generated sample dataset (conftest), laid out as a user has it:
the NDJSON export beside an images/ folder they downloaded the data rows into.

Looked up (read, not copied): Labelbox's docs "Export quick reference" (a sample image project
export: data_row {id, global_key, row_data, details {dataset_id, dataset_name, created_at,
updated_at, last_activity_at, created_by}}, media_attributes {height, width, mime_type},
attachments, metadata_fields, projects {<id>: {name, labels [{label_kind "Default", version
"1.0.0", id, label_details {created_at, updated_at, created_by, content_last_updated_at,
reviews}, performance_details, annotations {objects, classifications, relationships}}],
project_details}}}), "Export image annotations" (objects: feature_id, feature_schema_id, name,
value, annotation_kind, classifications, then bounding_box {top, left, height, width} as floats,
or polygon [{x, y}, ...]; ImagePolyline `line`, ImagePoint `point`), the export glossary
(external_id and global_key 'if utilized'), and lightly-ai/labelformat's test fixture
tests/fixtures/object_detection/Labelbox/export-result.ndjson (json.dumps' ", " and ": "
separators, 25-character ids, "image/jpg" mime types, the SDK's export-result.ndjson name).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from beam_tfrecord import sample

PROJECT_ID = "cltd3vkju021907u63w2odj69"
DATASET_ID = "clf9spwgw04w207ymfwy826qv"
ONTOLOGY_ID = "clu0w3qmm03ri07z1b8hk7mba"
EXPORT_NAME = "export-result.ndjson"
MIME = {"jpeg": "image/jpeg", "png": "image/png"}


def cuid(*parts: Any) -> str:
  """A stable 25-character id in Labelbox's style (cuid: 'c' + 24 lowercase alphanumerics)."""
  digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
  return "c" + "".join(c if c.isdigit() or i % 3 else chr(ord("a") + int(c, 16) % 26)
                       for i, c in enumerate(digest[:24]))


def value_of(name: str) -> str:
  """The ontology's `value` of a feature name: snake_case ('Traffic light' -> traffic_light)."""
  return "_".join(name.lower().split())


def schema_id(label: str) -> str:
  return cuid("schema", label)


def box_object(im: sample.SampleImage, index: int, box) -> Dict[str, Any]:
  label, x0, y0, x1, y1 = box
  return {"feature_id": cuid("feature", im.file_name, index),
          "feature_schema_id": schema_id(label), "name": label, "value": value_of(label),
          "annotation_kind": "ImageBoundingBox", "classifications": [],
          "bounding_box": {"top": float(y0), "left": float(x0),
                           "height": float(round(y1 - y0, 4)), "width": float(round(x1 - x0, 4))}}


def polygon_object(im: sample.SampleImage, index: int, box) -> Dict[str, Any]:
  """The box as an ImagePolygon (its 4 corners, clockwise from the top left): the same box."""
  label, x0, y0, x1, y1 = box
  return {"feature_id": cuid("feature", im.file_name, index),
          "feature_schema_id": schema_id(label), "name": label, "value": value_of(label),
          "annotation_kind": "ImagePolygon", "classifications": [],
          "polygon": [{"x": float(x), "y": float(y)}
                      for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))]}


def data_row(im: sample.SampleImage, objects: List[Dict[str, Any]], *,
             external_id: Optional[str], global_key: Optional[str], row_data: str,
             labels: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
  """One line of the export, key order as Labelbox writes it."""
  row: Dict[str, Any] = {"id": cuid("row", im.file_name)}
  if global_key is not None:
    row["global_key"] = global_key
  if external_id is not None:
    row["external_id"] = external_id
  row["row_data"] = row_data
  row["details"] = {"dataset_id": DATASET_ID, "dataset_name": "shapes",
                    "created_at": "2026-11-02T09:14:03.000+00:00",
                    "updated_at": "2026-11-02T09:14:05.000+00:00",
                    "last_activity_at": "2026-11-20T16:34:01.000+00:00",
                    "created_by": "annotator@example.com"}
  label = {"label_kind": "Default", "version": "1.0.0", "id": cuid("label", im.file_name),
           "label_details": {"created_at": "2026-11-20T16:21:26.000+00:00",
                             "updated_at": "2026-11-20T16:34:02.000+00:00",
                             "created_by": "annotator@example.com",
                             "content_last_updated_at": "2026-11-20T16:34:00.513+00:00",
                             "reviews": []},
           "performance_details": {"seconds_to_create": 41, "seconds_to_review": 0,
                                   "skipped": False},
           "annotations": {"objects": objects, "classifications": [], "relationships": []}}
  return {
      "data_row": row,
      "media_attributes": {"height": im.height, "width": im.width, "mime_type": MIME[im.format]},
      "attachments": [], "metadata_fields": [],
      "projects": {PROJECT_ID: {
          "name": "Shapes boxes",
          "labels": [label] if labels is None else labels,
          "project_details": {
              "ontology_id": ONTOLOGY_ID, "task_id": cuid("task"),
              "task_name": "Initial review task", "batch_id": cuid("batch"),
              "batch_name": "batch-1", "workflow_status": "DONE", "priority": 5,
              "consensus_expected_label_count": 1, "workflow_history": []}}}}


def write_labelbox(images: Sequence[sample.SampleImage], image_dir: Path, target: Path, *,
                   key: str = "external_id", row_data: str = "https", polygon_every: int = 0,
                   name: str = EXPORT_NAME, copy_images: bool = True) -> Path:
  """target/<name> (one data row per image, in `images` order) and target/images/ holding the
  images under their file names; returns the export file.

  key: what names the image file: 'external_id' (and global_key the same, as uploads by file
  name make them), 'global_key' (no external_id), 'row_data' (neither: only row_data's file
  name). row_data: 'https' (a Cloud Storage URL, as the docs' sample), 'gs' (gs://bucket/...)
  or 'local' (the image's absolute path in image_dir). polygon_every: every n-th object of an
  image (from its first; 1: all) an ImagePolygon of its box's corners, the others boxes."""
  target.mkdir(parents=True, exist_ok=True)
  if copy_images:
    (target / "images").mkdir(exist_ok=True)
  lines = []
  for im in images:
    if copy_images:
      shutil.copy(image_dir / im.file_name, target / "images" / im.file_name)
    objects = [(polygon_object if polygon_every and i % polygon_every == 0 else box_object)(
                   im, i, box)
               for i, box in enumerate(im.boxes)]
    url = {"https": f"https://storage.googleapis.com/labelbox-shapes/uploads/{im.file_name}"
                    "?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Expires=604800",
           "gs": f"gs://labelbox-shapes/uploads/{im.file_name}",
           "local": str((image_dir / im.file_name).resolve())}[row_data]
    external = im.file_name if key == "external_id" else None
    global_key = im.file_name if key in ("external_id", "global_key") else None
    lines.append(json.dumps(data_row(im, objects, external_id=external, global_key=global_key,
                                     row_data=url), ensure_ascii=False))
  path = target / name
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return path
