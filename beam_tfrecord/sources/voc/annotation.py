"""Pascal VOC: one XML per image under Annotations/, optional ImageSets/Main/<split>.txt; or a
folder of LabelImg XMLs (searched recursively) with the images beside them or under --images
(the raccoon dataset's layout, and a Roboflow VOC export's split folders).

Fields are found by tag name, never by position; coordinates may be floats; difficult,
truncated and pose are optional. The image is located by <filename> under the image root;
<folder> and <path> inside the XML are ignored (they name the annotator's machine).
XML is parsed with defusedxml, so entity bombs and external entities are refused.
"""
from __future__ import annotations

import posixpath
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import SourceOutput, is_hidden
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import (exists, list_dir, list_tree, open_read,
                                          read_text)


def _text(node, tag: str) -> Optional[str]:
  child = node.find(tag)
  if child is None or child.text is None:
    return None
  return child.text.strip()


def _float(node, tag: str, what: str) -> float:
  value = _text(node, tag)
  if value is None:
    raise InputError("parse", "missing_field", f"{what} has no <{tag}>")
  try:
    return float(value)
  except ValueError:
    raise InputError("parse", "wrong_type", f"{what} <{tag}> is {value!r}, not a number") from None


def _flag(node, tag: str, what: str) -> Optional[bool]:
  value = _text(node, tag)
  if value is None or value == "":
    return None
  try:
    return bool(int(float(value)))
  except (ValueError, OverflowError):
    raise InputError("parse", "wrong_type", f"{what} <{tag}> is {value!r}, not 0/1") from None


# Budgets of one annotation XML. ElementTree holds 25-45 bytes per byte of XML (1M nested
# <a>, 6.8 MB: 290 MB), so the size caps memory (~180 MB at 4 MB); a VOC file of 4 MB would
# describe ~13,000 objects. VOC nests 3 deep (annotation/object/bndbox).
MAX_XML_BYTES = 4 << 20
MAX_XML_DEPTH = 32


def _too_large_xml(size: str) -> InputError:
  return InputError("parse", "too_large", f"the XML file has {size} bytes, over the "
                    f"{MAX_XML_BYTES} an annotation file may have")


def read_xml(readable) -> bytes:
  """An XML file's bytes (a Beam ReadableFile or a path), at most MAX_XML_BYTES + 1 read."""
  if not hasattr(readable, "open"):
    with open_read(readable) as f:
      data = f.read(MAX_XML_BYTES + 1)
  else:
    with readable.open() as f:
      data = f.read(MAX_XML_BYTES + 1)
  if len(data) > MAX_XML_BYTES:
    raise _too_large_xml(f"more than {MAX_XML_BYTES}")
  return data


def _deeper_than(root, limit: int) -> bool:
  stack = [(root, 1)]
  while stack:
    node, depth = stack.pop()
    if depth > limit:
      return True
    stack.extend((child, depth + 1) for child in node)
  return False


def parse_xml(data: bytes) -> Tuple[str, Optional[int], Optional[int], List[ObjectAnnotation]]:
  """(filename, width, height, objects) of one VOC annotation document, of at most
  MAX_XML_BYTES nesting at most MAX_XML_DEPTH elements (InputError 'too_large', 'too_deep')."""
  import defusedxml.ElementTree as ET
  from defusedxml import DefusedXmlException
  if len(data) > MAX_XML_BYTES:
    raise _too_large_xml(str(len(data)))
  try:
    root = ET.fromstring(data)
  except DefusedXmlException as e:
    raise InputError("parse", "unsafe_xml", f"{type(e).__name__}: {e}") from None
  except (ET.ParseError, LookupError, ValueError) as e:  # LookupError: unknown encoding
    raise InputError("parse", "malformed_xml", f"{type(e).__name__}: {e}") from None
  if root.tag != "annotation":
    raise InputError("parse", "malformed_xml", f"root element is <{root.tag}>, not <annotation>")
  if _deeper_than(root, MAX_XML_DEPTH):
    raise InputError("parse", "too_deep", f"the XML nests deeper than {MAX_XML_DEPTH} elements")
  filename = _text(root, "filename")
  if not filename:
    raise InputError("parse", "missing_field", "annotation has no <filename>")
  width = height = None
  size = root.find("size")
  if size is not None:
    w, h = _text(size, "width"), _text(size, "height")
    try:
      width = int(float(w)) if w else None
      height = int(float(h)) if h else None
    except (ValueError, OverflowError):
      raise InputError("parse", "wrong_type", f"<size> is {w!r}x{h!r}") from None
  objects = []
  for i, obj in enumerate(root.findall("object")):
    what = f"object {i}"
    name = _text(obj, "name")
    if not name:
      raise InputError("parse", "missing_field", f"{what} has no <name>")
    bndbox = obj.find("bndbox")
    if bndbox is None:
      raise InputError("parse", "missing_field", f"{what} ({name!r}) has no <bndbox>")
    box = Box(*(_float(bndbox, tag, what) for tag in ("xmin", "ymin", "xmax", "ymax")))
    objects.append(ObjectAnnotation(
        label=name, box=box, difficult=_flag(obj, "difficult", what),
        truncated=_flag(obj, "truncated", what), pose=_text(obj, "pose") or None))
  return filename, width, height, objects


def parse_image_set(text: str) -> List[str]:
  """Image ids of one ImageSets/Main/<split>.txt (first column; class files add a flag)."""
  return [line.split()[0] for line in text.splitlines() if line.strip()]


# Image sets that are the union of others (VOC's trainval = train + val): not splits of their
# own when a part is present. With one part present, the other is the union minus it.
UNIONS: Dict[str, Tuple[str, ...]] = {"trainval": ("train", "val")}


def split_files(voc_root: str) -> Dict[str, str]:
  """{image set: uri} of ImageSets/Main/*.txt, without the per-class lists (aeroplane_train)."""
  from apache_beam.io.filesystems import FileSystems
  pattern = paths.join(paths.glob_escape(voc_root), "ImageSets/Main/*.txt")
  try:
    found = FileSystems.match([pattern])[0].metadata_list
  except Exception:
    return {}
  result = {}
  for meta in found:
    name = posixpath.basename(meta.path.replace("\\", "/"))[:-4]
    if "_" not in name and not name.startswith((".", "-")):
      result[name] = meta.path
  return dict(sorted(result.items()))


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


def resolve_split(member_of: Iterable[str], scope: Iterable[str]) -> Tuple[Optional[str], str]:
  """(split, '') for an image listed in the image sets `member_of`, considering only the sets
  in `scope`; (None, reason) when it is in none or in several. A union set counts only when
  none of its parts is in scope; with one part in scope, the union minus that part is the
  other part (only train and trainval: val = trainval - train)."""
  scope = set(scope)
  member = set(member_of) & scope
  for union, parts in UNIONS.items():
    present = [p for p in parts if p in scope]
    if union not in scope or not present:
      continue
    if union in member:
      member.discard(union)
      if len(present) == 1 and not member & set(parts):
        member.add(next(p for p in parts if p not in present))
  if len(member) == 1:
    return next(iter(member)), ""
  return None, "not_in_split" if not member else "several_splits"


def split_names(scope: Iterable[str]) -> List[str]:
  """The splits that image sets `scope` produce (see resolve_split)."""
  scope = set(scope)
  names = set(scope)
  for union, parts in UNIONS.items():
    present = [p for p in parts if p in scope]
    if union in scope and present:
      names.discard(union)
      names.update(parts)
  return sorted(names)


def check_input(inputs: Sequence[str], image_sets: Optional[str] = None) -> None:
  """Before running: one VOC directory, with Annotations/*.xml and the chosen image sets; or
  a folder of XMLs, or SPLIT=DIR folders (a Roboflow VOC export), whose XMLs and images
  ReadVoc checks when it is built."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.sources.checks import check_directory
  assigned = [paths.parse_assignment(item) for item in inputs]
  if len(assigned) > 1 and not all(split for split, _ in assigned):
    raise UsageError(f"--format voc takes one --input (a VOC directory or a folder of XMLs), "
                     f"or one SPLIT=DIR per split; got {len(inputs)} inputs")
  if len(assigned) > 1 or assigned[0][0]:
    if image_sets:
      raise UsageError("--image-sets applies to a VOC directory without SPLIT= inputs")
    for _, root in assigned:
      check_directory(root, "--input")
    return
  root = assigned[0][1]
  check_directory(root, "--input")
  if is_flat(root):  # a folder of XMLs (LabelImg): ReadVoc checks XMLs and images
    if image_sets:
      raise UsageError(f"--image-sets: {root} is a folder of XMLs without ImageSets/Main")
    return
  if not annotation_files(root):
    raise UsageError(f"--input {root} has no Annotations/*.xml: not a Pascal VOC directory "
                     "(VOCdevkit/VOC2012 holds Annotations/, JPEGImages/, ImageSets/Main/)")
  if image_sets:
    available = split_files(root)
    missing = [name for name in parse_image_sets(image_sets) if name not in available]
    if missing:
      raise UsageError(f"--image-sets: {', '.join(missing)} not in {root}/ImageSets/Main "
                       f"(it has {', '.join(available) or 'no image sets'})")


def annotation_files(voc_root: str) -> List[str]:
  """The XMLs in a VOC directory's Annotations/, sorted: .xml in any case (A.XML, as a folder
  of XMLs is read), hidden files (.DS_Store, ._a.xml) aside."""
  folder = paths.join(voc_root, "Annotations")
  return [paths.join(folder, name) for name in list_dir(folder)[1]
          if name.lower().endswith(".xml") and not is_hidden(name)]


def xml_stem(uri: str) -> str:
  """The image id of an annotation file: its name without .xml (what ImageSets lists)."""
  return posixpath.splitext(posixpath.basename(uri.replace("\\", "/")))[0]


def missing_annotations(element, scope: Sequence[str], lists: Dict[str, str]
                        ) -> List[ErrorRecord]:
  """(image id, {"xml": [...], "lists": [[set, ...]]}) -> a missing_annotation error when the
  chosen image sets `scope` list the id but Annotations/ has no XML for it (its image would
  vanish without a word)."""
  stem, joined = element
  if list(joined["xml"]):
    return []
  member_of = sorted({name for sets in joined["lists"] for name in sets} & set(scope))
  if not member_of:
    return []
  return [ErrorRecord(
      source=lists[member_of[0]], stage="parse", reason="missing_annotation", key=stem,
      level="image",
      message=f"image id {stem!r} is listed in ImageSets/Main/{', '.join(member_of)} but "
      f"Annotations/ has no {stem}.xml: it cannot be converted")]


def parse_image_sets(text: str) -> List[str]:
  return [name.strip() for name in text.split(",") if name.strip()]


class _ParseXml(beam.DoFn):

  def __init__(self, image_root: str, allow_absolute: bool, follow_symlinks: bool = False,
               flat_root: Optional[str] = None, split: Optional[str] = None,
               image_dirs: Sequence[str] = ()):
    self.image_root = image_root
    self.image_dirs = tuple(image_dirs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.flat_root = flat_root    # the XML folder of a flat (LabelImg) layout
    self.split = split

  def _locate(self, uri: str, filename: str) -> Tuple[str, str]:
    if self.flat_root is None:
      return paths.resolve(self.image_root, filename, self.allow_absolute, self.follow_symlinks)
    rel = uri[len(self.flat_root.rstrip("/\\")) + 1:].replace("\\", "/")
    names = image_candidates(rel, filename, self.image_root == self.flat_root, self.image_dirs)
    resolved = [paths.resolve(self.image_root, n, self.allow_absolute, self.follow_symlinks)
                for n in names]
    return next((r for r in resolved if exists(r[1])), resolved[0])

  def process(self, readable, splits: Dict[str, List[str]], scope: List[str]):
    uri = readable.metadata.path if hasattr(readable, "metadata") else readable
    stem = xml_stem(uri)
    filename = None  # the key of an error: the image's file name once known, else the XML
    try:
      filename, width, height, objects = parse_xml(read_xml(readable))
      key, image_uri = self._locate(uri, filename)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, filename or uri))
      return
    except Exception as e:  # unforeseen: report it, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unexpected_error", key=filename or uri,
          message=f"{type(e).__name__}: {e}"))
      return
    split = self.split
    if scope:
      member_of = splits.get(stem, [])
      split, reason = resolve_split(member_of, scope)
      if split is None:
        excluded = reason == "not_in_split" and bool(member_of)  # only in sets not chosen
        where = (f"the lists {sorted(member_of)}" if member_of else "no ImageSets/Main list")
        yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=uri, stage="parse", key=key,
            reason="excluded_by_image_sets" if excluded else reason,
            level="warning" if excluded else "image",
            message=f"image id {stem!r} is named by {where}"
            + (f", none of the chosen image sets {scope}" if excluded else "")))
        return
    yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                          objects=tuple(objects), split=split, width=width, height=height)


def _image_dirs(xml_root: str) -> List[str]:
  """Folders (relative) of a folder of XMLs that hold images, when no --images is given;
  UsageError when there are none (the images live elsewhere: --images must say where)."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.sources.base import image_extensions
  extensions = image_extensions()
  tree = [rel for rel in list_tree(xml_root) if not is_hidden(rel)]
  if not any(rel.lower().endswith(".xml") for rel in tree):
    raise UsageError(f"{xml_root} holds neither Annotations/ nor any .xml file")
  dirs = sorted({posixpath.dirname(rel) for rel in tree
                 if posixpath.splitext(rel)[1].lower() in extensions})
  if not dirs:
    import os
    parent = os.path.dirname(os.path.abspath(xml_root)) if not paths.is_remote(xml_root) else ""
    siblings = [d for d in list_dir(parent)[0] if d.lower() in ("images", "jpegimages", "img")]
    near = os.path.join(os.path.dirname(xml_root.rstrip("/")) or ".", siblings[0]) \
        if siblings else ""
    hint = f" (perhaps --images {near})" if near else ""
    raise UsageError(f"{xml_root} holds XMLs but no images beside them; give --images DIR, "
                     f"the folder their <filename> is in{hint}")
  return dirs


def is_flat(voc_root: str) -> bool:
  """A folder of XMLs rather than a VOC directory (no Annotations/). A missing directory is
  read as a VOC directory, whose source reports it as before."""
  subdirs, files = list_dir(voc_root)
  return bool(subdirs or files) and "Annotations" not in subdirs


def detect(path: str) -> Optional[str]:
  """--format auto: a VOC directory, or a folder holding XMLs (a CVAT export's annotations.xml
  is not one: only that name is looked into, so a big folder of XMLs costs no reads)."""
  from beam_tfrecord.sources.cvat import EXPORT_FILE, is_cvat_xml

  def voc_xmls(folder: str, names: List[str]) -> bool:
    return any(f.lower().endswith(".xml") and not (
        f == EXPORT_FILE and is_cvat_xml(paths.join(folder, f))) for f in names)

  subdirs, files = list_dir(path)
  if "Annotations" in subdirs:
    return "Annotations/"
  if voc_xmls(path, files):
    return "XMLs"
  # one level down only (raccoon_dataset/annotations/): deeper XMLs are more likely a
  # collection of datasets than one
  with_xml = [d for d in subdirs if not d.startswith(".") and
              voc_xmls(paths.join(path, d), list_dir(paths.join(path, d))[1])]
  if with_xml:
    return f"XMLs in {', '.join(d + '/' for d in with_xml)}"
  return None


class ReadVoc(beam.PTransform):
  """A Pascal VOC directory, or a folder of VOC XMLs -> SourceOutput.

  In: voc_root (holding Annotations/*.xml, optionally ImageSets/Main/*.txt; or XMLs anywhere
  below it) and image_root (default voc_root/JPEGImages; for a folder of XMLs, the images
  lie beside the XMLs unless image_root is given). Out: one ImageAnnotation per XML, split from
  ImageSets when `use_image_sets` (images listed in none or several lists become errors) or
  `split`, and ErrorRecords.
  """

  def __init__(self, voc_root: str, image_root: Optional[str] = None,
               use_image_sets: bool = True, allow_absolute: bool = False,
               image_sets: Optional[Sequence[str]] = None, follow_symlinks: bool = False,
               split: Optional[str] = None):
    super().__init__()
    self.voc_root = voc_root
    self.flat = is_flat(voc_root)
    self.image_root = image_root or (voc_root if self.flat else
                                     paths.join(voc_root, "JPEGImages"))
    self.image_dirs: List[str] = []
    if self.flat and not image_root:
      self.image_dirs = _image_dirs(voc_root)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.split = split
    # Membership comes from every list; `scope` is the lists that make splits.
    self.lists = (split_files(voc_root) if use_image_sets and not self.flat and not split
                  else {})
    self.scope = sorted(image_sets or self.lists)
    self.splits = split_names(self.scope) if self.lists else []

  def expand(self, root):
    members = (root
               | "SplitLists" >> beam.Create(sorted(self.lists.items()))
               | "ReadLists" >> beam.FlatMap(
                   lambda kv: [(stem, kv[0]) for stem in
                               parse_image_set(read_text(kv[1]).decode("utf-8"))])
               | "GroupSplits" >> beam.GroupByKey()
               | "SortSplits" >> beam.MapTuple(lambda stem, s: (stem, sorted(set(s)))))
    parse = _ParseXml(self.image_root, self.allow_absolute, self.follow_symlinks,
                      self.voc_root if self.flat else None, self.split, self.image_dirs)
    if self.flat:
      voc_root = self.voc_root
      xmls = (root
              | "Root" >> beam.Create([voc_root])
              | "ListXml" >> beam.FlatMap(lambda r: [
                  paths.join(r, rel) for rel in list_tree(r)
                  if rel.lower().endswith(".xml") and not is_hidden(rel)])
              | "Spread" >> beam.Reshuffle())
    else:  # listed rather than globbed: Annotations/A.XML counts, as in a folder of XMLs
      xmls = (root
              | "Root" >> beam.Create([self.voc_root])
              | "ListXml" >> beam.FlatMap(annotation_files)
              | "Spread" >> beam.Reshuffle())
    parsed = xmls | "Parse" >> beam.ParDo(parse, beam.pvalue.AsDict(members),
                                          self.scope).with_outputs(
                                              "errors", main="images")
    if not self.lists:
      return SourceOutput(images=parsed.images, errors=parsed.errors)
    # ids the chosen lists name without an XML: reported, never silently left out
    stems = xmls | "XmlIds" >> beam.Map(lambda uri: (xml_stem(uri), uri))
    missing = ({"xml": stems, "lists": members}
               | "JoinLists" >> beam.CoGroupByKey()
               | "MissingXml" >> beam.FlatMap(missing_annotations, self.scope, dict(self.lists)))
    errors = (parsed.errors, missing) | "VocErrors" >> beam.Flatten()
    return SourceOutput(images=parsed.images, errors=errors)


# --- the source protocol (sources/registry.py) ---

MASKS = False
EXPORT_WHAT = "XMLs beside the images"  # what each split folder of an export holds


def check(config) -> None:
  check_input(config.inputs, config.image_sets)


def possible_splits(config) -> Optional[set]:
  assigned = [paths.parse_assignment(item) for item in config.inputs]
  if len(assigned) != 1 or assigned[0][0]:
    return {split or DEFAULT_SPLIT for split, _ in assigned}
  if config.image_sets:
    return set(split_names(parse_image_sets(config.image_sets)))
  if is_flat(config.inputs[0]):
    return {DEFAULT_SPLIT}
  return set(split_names(split_files(config.inputs[0]))) or {DEFAULT_SPLIT}


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  allow, follow = config.allow_absolute_paths, config.follow_symlinks
  assigned = config.input_image_roots()  # (split, VOC dir, its --images or None)
  if len(assigned) == 1 and not assigned[0][0]:
    voc = ReadVoc(assigned[0][1], assigned[0][2], use_image_sets=not config.split,
                  allow_absolute=allow, follow_symlinks=follow,
                  image_sets=parse_image_sets(config.image_sets) if config.image_sets else None)
    return root | "ReadVoc" >> voc, sorted(voc.splits)
  if not all(split for split, _, _ in assigned):
    raise ValueError("--format voc takes one --input (a VOC directory or a folder of XMLs), "
                     "or one SPLIT=DIR per split")
  per_folder = [root | f"ReadVoc[{split}]" >> ReadVoc(
      uri, images, allow_absolute=allow, follow_symlinks=follow,
      split=split) for split, uri, images in assigned]
  return (SourceOutput(
      images=tuple(o.images for o in per_folder) | "VocImages" >> beam.Flatten(),
      errors=tuple(o.errors for o in per_folder) | "VocErrors" >> beam.Flatten()),
      sorted(split for split, _, _ in assigned))


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Annotations/ and ImageSets/Main/ under the VOC directory; the image root (default
  VOC/JPEGImages); a folder of XMLs: everything below it."""
  given = bool(config.images)
  patterns: List[Tuple[str, str]] = []
  implied: List[str] = []
  for item in config.inputs:
    _, voc = paths.parse_assignment(item)
    if is_flat(voc):  # a folder of XMLs: XMLs and (unless --images) images anywhere below
      patterns.append(("tree", paths.join(voc, "**")))
      continue
    patterns.append(("tree", paths.join(paths.join(voc, "Annotations"), "**")))
    patterns.append(("tree", paths.join(paths.join(voc, "ImageSets"), "**")))
    if not given and not implied:
      implied.append(paths.join(voc, "JPEGImages"))
  return patterns, implied
