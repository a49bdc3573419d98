"""Class folders: ROOT/CLASS/IMAGE, or ROOT/SPLIT/CLASS/IMAGE, or one `SPLIT=DIR` per split.

The layout of Keras' image_dataset_from_directory and of the TensorFlow TFRecord tutorial: a
folder's name is the class of every image below it (sub-folders included). The first level
is taken as splits when every folder there is named like one (train, val, valid, validation,
test). Hidden files and files Pillow has no format for are skipped and reported as warnings
(counted in the manifest by reason), never converted. Images carry image-level labels.
Symlinked folders (class folders assembled with ln -s) are followed with --follow-symlinks,
as Keras follows them, loops excepted; without it a symlinked class or split folder is an
error before the run that names the option, and a symlinked folder deeper down a warning.
"""
from __future__ import annotations

import os
import posixpath
from typing import List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.errors import UsageError, named_few
from beam_tfrecord.records.model import ImageAnnotation, InputError
from beam_tfrecord.sources.base import (SourceOutput, image_extensions,
                                        is_hidden)
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import list_dir, list_tree, walk_tree

SPLIT_NAMES = ("train", "val", "valid", "validation", "test")


def split_level(subdirs: Sequence[str]) -> bool:
  """True when the first level of a class-folder tree holds splits, not classes."""
  visible = [d for d in subdirs if not d.startswith(".")]
  return bool(visible) and all(d.lower() in SPLIT_NAMES for d in visible)


def plan(inputs: Sequence[Tuple[Optional[str], str]], follow_symlinks: bool = False
         ) -> List[Tuple[Optional[str], str, str]]:
  """(split or None, split directory, key prefix) for each tree of class folders.

  `inputs`: (split, dir) from --input [SPLIT=]DIR. Keys are relative to the input directory,
  so that ROOT/train/cat/1.jpg has the key train/cat/1.jpg. Without follow_symlinks, a
  symlinked split or class folder is a UsageError naming --follow-symlinks (its images would
  be missing from the output without a word)."""
  result = []
  for split, root in inputs:
    subdirs, _ = list_dir(root)
    if not subdirs:
      raise UsageError(f"{root} holds no class folders (expected ROOT/CLASS/IMAGE or "
                       "ROOT/SPLIT/CLASS/IMAGE)")
    if split is None and split_level(subdirs):
      for name in subdirs:
        if not name.startswith("."):
          result.append((name, root, name))
    else:
      result.append((split, root, ""))
  if not follow_symlinks:
    linked = symlinked_folders(result)
    if linked:
      are = "is a symlink" if len(linked) == 1 else "are symlinks"
      raise UsageError(f"{named_few(linked, 5)} {are} to a folder; pass --follow-symlinks "
                       "to read the images in symlinked class folders")
  return result


def symlinked_folders(tasks: Sequence[Tuple[Optional[str], str, str]]) -> List[str]:
  """The split and class folders of `plan`'s tasks that are symlinks (local trees only)."""
  found = []
  for _, root, prefix in tasks:
    base = paths.join(root, prefix) if prefix else root
    if paths.is_remote(base):
      continue
    if prefix and os.path.islink(base):
      found.append(base)
    found.extend(path for path in (os.path.join(base, d) for d in list_dir(base)[0]
                                   if not d.startswith("."))
                 if os.path.islink(path))
  return sorted(set(found))


def classify(relative: str, extensions) -> Tuple[Optional[str], Optional[InputError]]:
  """The class of a file relative to a split directory (CLASS/.../IMAGE), or why it is
  skipped. Pure."""
  if is_hidden(relative):
    return None, InputError("locate", "hidden_file", f"{relative} is hidden; skipped")
  if posixpath.splitext(relative)[1].lower() not in extensions:
    return None, InputError("locate", "not_an_image",
                            f"{relative} has no image extension Pillow knows; skipped")
  if "/" not in relative:
    return None, InputError("locate", "not_in_class_folder",
                            f"{relative} lies outside any class folder; skipped")
  return relative.split("/", 1)[0], None


class _ListClass(beam.DoFn):
  """(split, root, prefix) -> ImageAnnotation with labels=(class,), and skip warnings."""

  def __init__(self, allow_absolute: bool, follow_symlinks: bool):
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.extensions = None

  def setup(self):
    self.extensions = image_extensions()

  def process(self, task):
    split, root, prefix = task
    base = paths.join(root, prefix) if prefix else root
    if paths.is_remote(base):
      listed, linked = list_tree(base), []
    else:
      listed, linked = walk_tree(base, self.follow_symlinks)
    for rel in linked:  # symlinked folders below the class folders (plan checked those)
      why = ("leads back to a folder above it (a loop); not walked again" if
             self.follow_symlinks else "is a symlink to a folder; not followed: pass "
             "--follow-symlinks to read the images in it")
      yield beam.pvalue.TaggedOutput("errors", InputError(
          "locate", "symlinked_folder", f"{rel} {why}").record(
              paths.join(base, rel), f"{prefix}/{rel}" if prefix else rel, level="warning"))
    for rel in listed:
      key_name = f"{prefix}/{rel}" if prefix else rel
      label, skipped = classify(rel, self.extensions)
      if skipped is not None:
        yield beam.pvalue.TaggedOutput("errors", skipped.record(
            paths.join(base, rel), key_name, level="warning"))
        continue
      try:
        key, uri = paths.resolve(root, key_name, self.allow_absolute, self.follow_symlinks)
      except InputError as e:
        yield beam.pvalue.TaggedOutput("errors", e.record(paths.join(base, rel), key_name))
        continue
      yield ImageAnnotation(key=key, uri=uri, source_id=key, source=base, split=split,
                            labels=(label,))


class ReadFolders(beam.PTransform):
  """Class-folder trees -> SourceOutput.

  In: (split or None, directory) per --input. Out: one ImageAnnotation per image with its
  class as the image-level label, the classes (every class folder, empty ones included, ids
  from `first_id` in sorted name order, as Keras numbers them), and warnings for skipped files.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str]], first_id: int = 0,
               allow_absolute: bool = False, follow_symlinks: bool = False):
    super().__init__()
    self.tasks = plan(inputs, follow_symlinks)
    # files beside the split folders (a README, .DS_Store) are reported like any other
    self.loose = sorted({(root, name) for split, root, prefix in self.tasks if prefix
                         for name in list_dir(root)[1]})
    self.splits = sorted({s for s, _, _ in self.tasks if s})
    classes = set()
    for _, root, prefix in self.tasks:
      subdirs, _ = list_dir(paths.join(root, prefix) if prefix else root)
      classes.update(d for d in subdirs if not d.startswith("."))
    self.classes = sorted(classes)
    self.first_id = first_id
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks

  def expand(self, root):
    listed = (root
              | "Folders" >> beam.Create(self.tasks)
              | "Spread" >> beam.Reshuffle()
              | "List" >> beam.ParDo(_ListClass(self.allow_absolute, self.follow_symlinks))
              .with_outputs("errors", main="images"))
    extensions = image_extensions()
    loose = root | "Loose" >> beam.Create([
        classify(name, extensions)[1].record(paths.join(top, name), name, level="warning")
        for top, name in self.loose])
    categories = root | "Classes" >> beam.Create(
        [(name, i + self.first_id) for i, name in enumerate(self.classes)])
    errors = (listed.errors, loose) | "Errors" >> beam.Flatten()
    return SourceOutput(images=listed.images, errors=errors, categories=categories)


ANNOTATION_FILES = (".xml", ".json", ".ndjson", ".jsonl", ".csv", ".yaml", ".yml")


def detect(path: str) -> Optional[str]:
  """--format auto: 'class folders' when `path` holds folders (or split folders) of images."""
  subdirs, top_files = list_dir(path)
  visible = [d for d in subdirs if not d.startswith(".")]
  if not visible:
    return None
  # an annotation file at the top (CVAT's annotations.xml beside images/, a Labelbox .ndjson)
  # makes the folders its images, not classes
  if any(f.lower().endswith(ANNOTATION_FILES) for f in top_files if not f.startswith(".")):
    return None
  extensions = image_extensions()
  levels = [paths.join(path, d) for d in visible]
  if split_level(visible):
    levels = [paths.join(s, c) for s in levels for c in list_dir(s)[0] if not c.startswith(".")]
  # every class folder holds images and no annotation files: VOC's JPEGImages/Annotations and
  # YOLO's images/labels fail the first test; XMLs, or Darknet label .txt files named like the
  # images, beside the images fail the second (a stray notes.txt does not)
  annotation = ANNOTATION_FILES
  if not levels:
    return None
  for level in levels:
    files = list_dir(level)[1]
    stems = {posixpath.splitext(f)[0] for f in files
             if posixpath.splitext(f)[1].lower() in extensions}
    if (not stems or any(f.lower().endswith(annotation) for f in files) or
        any(f.endswith(".txt") and f[:-4] in stems for f in files)):
      return None
  return "split folders of class folders" if split_level(visible) else "class folders"


# --- the source protocol (sources/registry.py) ---

MASKS = False
OPTIONS = ()  # only the common settings (sources/options.COMMON)
IMAGES = False  # the class folders are the images: --images is refused, never ignored


def check(config) -> None:
  plan([paths.parse_assignment(item) for item in config.inputs], config.follow_symlinks)


def possible_splits(config) -> Optional[set]:
  return None  # not looked at before the run


def image_level(config) -> bool:
  return True  # one class per image: the classification schema


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  reader = ReadFolders([paths.parse_assignment(item) for item in config.inputs], first_id,
                       config.allow_absolute_paths, config.follow_symlinks)
  return root | "ReadFolders" >> reader, reader.splits


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Everything below each input."""
  return [("tree", paths.join(paths.parse_assignment(item)[1], "**"))
          for item in config.inputs], []
