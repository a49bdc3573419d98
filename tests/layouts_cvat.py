"""A CVAT for images 1.1 export of the generated sample dataset (conftest), written the way CVAT
writes it.

Looked up (read, not copied): CVAT's exporter cvat/apps/dataset_manager/formats/cvat.py
(create_xml_dumper: xml.sax XMLGenerator, two-space indentation, `<version>1.1</version>` first;
dump_as_cvat_annotation: `<image id name [subset task_id] width height>`, shapes with
`label source occluded` then `xtl ytl xbr ybr` or `points="x,y;x,y"` in '{:.2f}', then
`z_order`, `group_id` only when grouped; _export_task_or_job / _export_project: annotations.xml
beside images/<name>, or images/<subset>/<name> for a project), and
cvat/apps/dataset_manager/bindings.py (the meta: TaskData.meta_for_task's field order, JobData's
`<job>`, ProjectData's `<project>` with `<tasks>`, `<subsets>` and its labels after the
assignee; `<dumped>` after the task/job/project); the docs' "XML annotation format" page.
"""
from __future__ import annotations

import contextlib
import shutil
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple
from xml.sax.saxutils import XMLGenerator

from beam_tfrecord import sample

SUBSETS = {"train": "Train", "val": "Validation"}  # CVAT's suggested subset names
COLORS = ("#fa3253", "#33ddff", "#ff6037", "#b83df5")
CREATED = "2026-11-20 09:00:00.000000+00:00"
# (tag, attributes in CVAT's order), and optionally its CVAT attributes as (name, value) pairs
Shape = Tuple  # (str, OrderedDict) or (str, OrderedDict, Sequence[Tuple[str, str]])


class _Writer:
  """CVAT's XmlAnnotationWriter: every element on its own line, indented two spaces a level."""

  def __init__(self, f):
    self.gen = XMLGenerator(f, "utf-8")
    self.level = 0

  def indent(self) -> None:
    self.gen.ignorableWhitespace("\n" + "  " * self.level)

  def open(self, tag: str, attrs: Optional[Dict[str, str]] = None) -> None:
    self.indent()
    self.gen.startElement(tag, attrs or {})
    self.level += 1

  def close(self, tag: str) -> None:
    self.level -= 1
    self.indent()
    self.gen.endElement(tag)

  def attribute(self, name: str, value: str) -> None:
    """A shape's attribute: `<attribute name="...">value</attribute>` on its own line."""
    self.indent()
    self.gen.startElement("attribute", {"name": name})
    self.gen.characters(value)
    self.gen.endElement("attribute")

  def meta(self, fields) -> None:
    """_add_meta: dicts nest, lists of (tag, dict) repeat, strings are text."""
    self.level += 1
    for key, value in fields.items():
      if isinstance(value, OrderedDict):
        self.indent()
        self.gen.startElement(key, {})
        self.meta(value)
        self.indent()
        self.gen.endElement(key)
      elif isinstance(value, list):
        self.indent()
        self.gen.startElement(key, {})
        for pair in value:
          self.meta(OrderedDict([pair]))
        self.indent()
        self.gen.endElement(key)
      else:
        self.indent()
        self.gen.startElement(key, {})
        self.gen.characters(value)
        self.gen.endElement(key)
    self.level -= 1


def _labels(names: Sequence[str]) -> List[Tuple[str, OrderedDict]]:
  return [("label", OrderedDict([("name", n), ("color", COLORS[i % len(COLORS)]),
                                 ("type", "any"), ("attributes", [])]))
          for i, n in enumerate(names)]


def _task(task_id: int, name: str, size: int, subset: str, labels=None) -> OrderedDict:
  meta = OrderedDict([
      ("id", str(task_id)), ("name", name), ("size", str(size)), ("mode", "annotation"),
      ("overlap", "0"), ("bugtracker", ""), ("created", CREATED), ("updated", CREATED),
      ("subset", subset), ("start_frame", "0"), ("stop_frame", str(size - 1)),
      ("frame_filter", ""),
      ("segments", [("segment", OrderedDict([
          ("id", str(task_id * 10)), ("start", "0"), ("stop", str(size - 1)),
          ("url", f"http://localhost:8080/api/jobs/{task_id * 10}")]))]),
      ("owner", OrderedDict([("username", "admin"), ("email", "admin@example.com")])),
      ("assignee", "")])
  if labels is not None:
    meta["labels"] = _labels(labels)
  return meta


def box_attrs(label: str, x0: float, y0: float, x1: float, y1: float, occluded: int = 0,
              group: int = 0) -> OrderedDict:
  attrs = OrderedDict([("label", label), ("source", "manual"), ("occluded", str(occluded)),
                       ("xtl", f"{x0:.2f}"), ("ytl", f"{y0:.2f}"), ("xbr", f"{x1:.2f}"),
                       ("ybr", f"{y1:.2f}"), ("z_order", "0")])
  if group:
    attrs["group_id"] = str(group)
  return attrs


def polygon_attrs(label: str, points: Sequence[Tuple[float, float]], occluded: int = 0,
                  group: int = 0) -> OrderedDict:
  attrs = OrderedDict([("label", label), ("source", "manual"), ("occluded", str(occluded)),
                       ("points", ";".join(f"{x:.2f},{y:.2f}" for x, y in points)),
                       ("z_order", "0")])
  if group:
    attrs["group_id"] = str(group)
  return attrs


def write_cvat(images: Sequence[sample.SampleImage], image_dir: Path, target: Path,
               kind: str = "task", labels: Optional[Sequence[str]] = None,
               extra: Optional[Dict[str, List[Shape]]] = None, occluded: bool = False,
               save_images: bool = True) -> Path:
  """An unpacked 'CVAT for images 1.1' export of `images` under target: annotations.xml and
  (save_images) images/<name>, or for kind 'project' images/<Subset>/<name> with one task per
  split (subsets Train and Validation). kind: task, job or project. Each sample box is a
  <box> (occluded="1" on every other box when `occluded`); `extra` adds shapes to an image by
  file name after its boxes, each with its <attribute>s when it has a third item. Returns annotations.xml."""
  target.mkdir(parents=True, exist_ok=True)
  labels = list(labels if labels is not None else
                sorted({b[0] for im in images for b in im.boxes}))
  ordered = sorted(images, key=lambda im: (SUBSETS[im.split] if kind == "project" else "",
                                           im.file_name))
  if kind == "project":
    subsets = sorted({SUBSETS[im.split] for im in images})
    task_ids = {s: i + 1 for i, s in enumerate(subsets)}
    counts = {s: sum(1 for im in images if SUBSETS[im.split] == s) for s in subsets}
    meta = OrderedDict([("project", OrderedDict([
        ("id", "1"), ("name", "shapes"), ("bugtracker", ""), ("created", CREATED),
        ("updated", CREATED),
        ("tasks", [("task", _task(task_ids[s], f"shapes {s}", counts[s], s)) for s in subsets]),
        ("subsets", "\n".join(subsets)),
        ("owner", OrderedDict([("username", "admin"), ("email", "admin@example.com")])),
        ("assignee", ""), ("labels", _labels(labels))]))])
  elif kind == "job":
    task = _task(1, "shapes", len(images), "default", labels)
    meta = OrderedDict([("job", OrderedDict(
        [("id", "10")] + [(k, v) for k, v in task.items() if k not in ("id", "name")]))])
  else:
    meta = OrderedDict([("task", _task(1, "shapes", len(images), "default", labels))])
  meta["dumped"] = "2026-11-23 10:00:00.000000+00:00"
  extra = extra or {}
  path = target / "annotations.xml"
  with document(path, meta) as w:
    frames: Dict[str, int] = {}
    for im in ordered:
      subset = SUBSETS[im.split] if kind == "project" else ""
      frame = frames.get(subset, 0)
      frames[subset] = frame + 1
      attrs = OrderedDict([("id", str(frame)), ("name", im.file_name)])
      if kind == "project":
        attrs.update([("subset", subset), ("task_id", str(task_ids[subset]))])
      attrs.update([("width", str(im.width)), ("height", str(im.height))])
      w.open("image", attrs)
      for i, (label, x0, y0, x1, y1) in enumerate(im.boxes):
        w.open("box", box_attrs(label, x0, y0, x1, y1, int(occluded and i % 2 == 1)))
        w.close("box")
      for tag, shape, *attributes in extra.get(im.file_name, []):
        w.open(tag, shape)
        for name, value in (attributes[0] if attributes else ()):
          w.attribute(name, value)
        w.close(tag)
      w.close("image")
      if save_images:
        folder = target / "images" / subset
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(image_dir / im.file_name, folder / im.file_name)
  return path


@contextlib.contextmanager
def document(path: Path, meta: OrderedDict):
  """annotations.xml as CVAT's dumper writes it around its images: the declaration,
  `<annotations>`, `<version>1.1</version>`, the `<meta>`; the writer is yielded for the
  images, then the root is closed."""
  with open(path, "wb") as f:
    w = _Writer(f)
    w.gen.startDocument()
    w.gen.startElement("annotations", {})
    w.level += 1
    w.indent()
    w.gen.startElement("version", {})
    w.gen.characters("1.1")
    w.gen.endElement("version")
    w.indent()
    w.gen.startElement("meta", {})
    w.meta(meta)
    w.indent()
    w.gen.endElement("meta")
    yield w
    w.level -= 1
    w.indent()
    w.gen.endElement("annotations")
    w.indent()
    w.gen.endDocument()
