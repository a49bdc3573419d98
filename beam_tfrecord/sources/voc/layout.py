"""Where a VOC input's files are: the XMLs of a VOC directory (Annotations/) or of a folder of
LabelImg XMLs (searched recursively), and where the image an XML names may lie. Beam-free."""
from __future__ import annotations

import os
import posixpath
from typing import List, Sequence

from beam_tfrecord.errors import UsageError
from beam_tfrecord.sources.base import image_extensions, is_hidden
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import list_dir, list_tree


def image_candidates(xml_relative: str, filename: str, beside: bool,
                     image_dirs: Sequence[str] = ()) -> List[str]:
  """Names (relative to the image root) an XML's <filename> may be found at, in order: beside
  the XML, then in the tree's other folders holding images (the image root is the XML
  folder: raccoon/annotations/ + raccoon/images/ given as raccoon/); or, under a separate
  image root, mirroring the XML's sub-folder and then directly in it. <path> and <folder> are
  never used: they name the annotator's machine."""
  folder = posixpath.dirname(xml_relative)
  mirrored = posixpath.join(folder, filename) if folder else filename
  if beside:
    others = [posixpath.join(d, filename) if d else filename for d in image_dirs]
    return list(dict.fromkeys([mirrored] + others))
  return [mirrored, filename] if folder else [filename]


def annotation_files(voc_root: str) -> List[str]:
  """The XMLs in a VOC directory's Annotations/, sorted: .xml in any case (A.XML, as a folder
  of XMLs is read), hidden files (.DS_Store, ._a.xml) aside."""
  folder = paths.join(voc_root, "Annotations")
  return [paths.join(folder, name) for name in list_dir(folder)[1]
          if name.lower().endswith(".xml") and not is_hidden(name)]


def xml_files(folder: str) -> List[str]:
  """The XMLs anywhere below a folder of XMLs (LabelImg), hidden ones aside."""
  return [paths.join(folder, rel) for rel in list_tree(folder)
          if rel.lower().endswith(".xml") and not is_hidden(rel)]


def xml_stem(uri: str) -> str:
  """The image id of an annotation file: its name without .xml (what ImageSets lists)."""
  return posixpath.splitext(posixpath.basename(uri.replace("\\", "/")))[0]


def find_image_dirs(xml_root: str) -> List[str]:
  """Folders (relative) of a folder of XMLs that hold images, when no --images is given;
  UsageError when there are none (the images live elsewhere: --images must say where)."""
  extensions = image_extensions()
  tree = [rel for rel in list_tree(xml_root) if not is_hidden(rel)]
  if not any(rel.lower().endswith(".xml") for rel in tree):
    raise UsageError(f"{xml_root} holds neither Annotations/ nor any .xml file")
  dirs = sorted({posixpath.dirname(rel) for rel in tree
                 if posixpath.splitext(rel)[1].lower() in extensions})
  if not dirs:
    parent = os.path.dirname(os.path.abspath(xml_root)) if not paths.is_remote(xml_root) else ""
    siblings = [d for d in list_dir(parent)[0] if d.lower() in ("images", "jpegimages", "img")]
    near = os.path.join(os.path.dirname(xml_root.rstrip("/")) or ".", siblings[0]) \
        if siblings else ""
    hint = f" (perhaps --images {near})" if near else ""
    raise UsageError(f"{xml_root} holds XMLs but no images beside them; give --images DIR, "
                     f"the folder their <filename> is in{hint}")
  return dirs


def is_flat(voc_root: str) -> bool:
  """A folder of XMLs rather than a VOC directory (no Annotations/, nor SegmentationClass/).
  A missing directory is read as a VOC directory, whose source reports it as before."""
  subdirs, files = list_dir(voc_root)
  return (bool(subdirs or files) and "Annotations" not in subdirs
          and "SegmentationClass" not in subdirs)
