"""--format auto for Pascal VOC: a VOC directory, or a folder holding XMLs. Beam-free."""
from __future__ import annotations

from typing import List, Optional

from beam_tfrecord.sources.cvat.detection import EXPORT_FILE, is_cvat_xml
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import list_dir


def detect(path: str) -> Optional[str]:
  """--format auto: a VOC directory, or a folder holding XMLs (a CVAT export's annotations.xml
  is not one: only that name is looked into, so a big folder of XMLs costs no reads)."""

  def voc_xmls(folder: str, names: List[str]) -> bool:
    return any(f.lower().endswith(".xml") and not (
        f == EXPORT_FILE and is_cvat_xml(paths.join(folder, f))) for f in names)

  subdirs, files = list_dir(path)
  if "Annotations" in subdirs:
    return "Annotations/"
  if "SegmentationClass" in subdirs:  # semantic segmentation only (--schema deeplab)
    return "SegmentationClass/"
  if voc_xmls(path, files):
    return "XMLs"
  # one level down only (raccoon_dataset/annotations/): deeper XMLs are more likely a
  # collection of datasets than one
  with_xml = [d for d in subdirs if not d.startswith(".") and
              voc_xmls(paths.join(path, d), list_dir(paths.join(path, d))[1])]
  if with_xml:
    return f"XMLs in {', '.join(d + '/' for d in with_xml)}"
  return None
