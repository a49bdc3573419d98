"""A YOLO dataset's description: an Ultralytics dataset yaml, or a Darknet `obj.data` with
its `obj.names`. It is read when the pipeline is built (a problem with it is a UsageError).
Beam-free."""
from __future__ import annotations

import dataclasses
import os
import posixpath
from typing import Dict, Optional, Sequence, Tuple

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.keypoints import KeypointLayout, layout_of
from beam_tfrecord.sources.detect import EXPORT_SPLITS
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import exists, list_dir, parent, read_text

YAML_SPLITS = ("train", "val", "test")          # Ultralytics keys, kept as split names
DARKNET_SPLITS = (("train", "train"), ("valid", "valid"))  # obj.data key -> split
DARKNET_NAMES = ("obj.data",)

# Budgets keep a YOLO dataset's memory proportional to its files (listing.MAX_LIST_BYTES and
# labels.MAX_LABEL_BYTES are the others): the dataset yaml, obj.data and obj.names are small
# (1 MB is ~50,000 class names). Larger ones are 'too_large'.
MAX_YAML_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class YoloDataset:
  """What a data.yaml / obj.data says: keys are relative to `root`; every split lists image
  directories or .txt lists of image paths (`bases`: directories list lines may be relative
  to, besides the list's own)."""
  described_by: str
  root: str
  names: Tuple[str, ...]
  splits: Tuple[Tuple[str, Tuple[str, ...]], ...]
  bases: Tuple[str, ...] = ()
  kpt_shape: Optional[Tuple[int, int]] = None  # pose: (keypoints, values per keypoint)
  kpt_names: Tuple[str, ...] = ()  # pose: the K points' names (`kpt_names`, else 0..K-1)

  @property
  def layout(self) -> Optional[KeypointLayout]:
    """A pose dataset's keypoint layout: K points shared by every class (no skeleton)."""
    if self.kpt_shape is None:
      return None
    return layout_of([(name, self.kpt_names, ()) for name in self.names])


def join_path(base: str, rel: str) -> str:
  """`rel` under `base` as an absolute path (remote and absolute paths as they are)."""
  if paths.is_remote(rel) or os.path.isabs(rel):
    return rel
  joined = paths.join(base, rel)
  return joined if paths.is_remote(joined) else os.path.abspath(joined)


def parse_names(value, where: str) -> Tuple[str, ...]:
  """`names` as a list, or as an {index: name} dict with indices 0..N-1."""
  if isinstance(value, (list, tuple)):
    names = [str(n) for n in value]
  elif isinstance(value, dict):
    try:
      indexed = {int(k): str(v) for k, v in value.items()}
    except (TypeError, ValueError):
      raise UsageError(f"{where}: `names` keys must be class indices, got "
                       f"{sorted(map(str, value))}") from None
    if sorted(indexed) != list(range(len(indexed))):
      raise UsageError(f"{where}: `names` indices must be 0..{len(indexed) - 1}, got "
                       f"{sorted(indexed)}")
    names = [indexed[i] for i in range(len(indexed))]
  else:
    raise UsageError(f"{where}: `names` must be a list or an {{index: name}} mapping")
  if not names:
    raise UsageError(f"{where}: `names` is empty")
  return tuple(names)


def parse_kpt_shape(value, where: str) -> Optional[Tuple[int, int]]:
  """`kpt_shape: [K, D]` of a pose yaml: K >= 1 keypoints of D = 2 (x y) or 3 (x y
  visibility) values; None when absent."""
  if value is None:
    return None
  ok = (isinstance(value, (list, tuple)) and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and value[0] >= 1 and value[1] in (2, 3))
  if not ok:
    raise UsageError(f"{where}: `kpt_shape` must be [keypoints, 2 or 3], got {value!r}")
  return int(value[0]), int(value[1])


def parse_kpt_names(value, count: int, where: str) -> Tuple[str, ...]:
  """The names of a pose dataset's K points: Ultralytics' `kpt_names` ({class index: [K
  names]}, or a list of such lists), the first class's (every class shares the K slots of a
  YOLO pose line); "0".."K-1" when absent."""
  if value is None:
    return tuple(str(i) for i in range(count))
  lists = ([value[k] for k in sorted(value, key=str)] if isinstance(value, dict) else
           value if isinstance(value, list) and value and isinstance(value[0], list) else
           [value])
  names = lists[0] if lists else None
  if not isinstance(names, list) or len(names) != count:
    raise UsageError(f"{where}: `kpt_names` must give the {count} names of `kpt_shape`'s "
                     f"points, got {value!r:.120}")
  return tuple(str(n) for n in names)


def first_existing(candidates: Sequence[str]) -> Optional[str]:
  for candidate in candidates:
    if exists(candidate):
      return candidate
  return None


def load_data_yaml(uri: str) -> YoloDataset:
  """An Ultralytics dataset yaml. `path` is relative to the yaml (default: its directory);
  train/val/test are a directory, a .txt list, or a list of them, relative to `path`. As in
  Ultralytics, an entry `../x` that does not exist is tried as `x` (Roboflow's data.yaml says
  `../train/images` next to train/)."""
  import yaml
  try:
    doc = yaml.safe_load(read_text(uri, MAX_YAML_BYTES).decode("utf-8-sig"))
  except Exception as e:  # unreadable, not UTF-8, not YAML
    raise UsageError(f"cannot read {uri} as YAML: {type(e).__name__}: {e}") from None
  if not isinstance(doc, dict):
    raise UsageError(f"{uri} is not a YOLO dataset yaml (no key: value mapping)")
  if "names" not in doc:
    raise UsageError(f"{uri} has no `names` (the class list of a YOLO dataset yaml)")
  names = parse_names(doc["names"], uri)
  kpt_shape = parse_kpt_shape(doc.get("kpt_shape"), uri)
  kpt_names = (parse_kpt_names(doc.get("kpt_names"), kpt_shape[0], uri) if kpt_shape else ())
  root = join_path(".", parent(uri))
  if doc.get("path"):
    root = join_path(root, str(doc["path"]))
  splits = []
  for split in YAML_SPLITS:
    value = doc.get(split)
    if not value:
      continue
    entries = []
    for entry in (value if isinstance(value, list) else [value]):
      entry = str(entry)
      found = first_existing([join_path(root, entry)] + (
          [join_path(root, entry[3:])] if entry.startswith("../") else []))
      if found is None:
        raise UsageError(f"{uri}: {split} entry {entry!r} does not exist under {root}")
      entries.append(found)
    splits.append((_folder_split(split, entries), tuple(entries)))
  if not splits:
    raise UsageError(f"{uri} names no images (no train/val/test entries)")
  return YoloDataset(posixpath.basename(uri.replace("\\", "/")), root, names, tuple(splits),
                     kpt_shape=kpt_shape, kpt_names=kpt_names)


def _folder_split(key: str, entries: Sequence[str]) -> str:
  """A split named as its folder when the yaml points at SPLIT/images (a Roboflow export:
  `val: ../valid/images` gives the split `valid`), else the yaml's key."""
  folders = {posixpath.basename(posixpath.dirname(e.replace("\\", "/").rstrip("/")))
             for e in entries if posixpath.basename(e.replace("\\", "/").rstrip("/")) == "images"}
  if len(folders) == 1 and len(entries) == 1 and next(iter(folders)).lower() in EXPORT_SPLITS:
    return folders.pop()
  return key


def parse_darknet_data(text: str) -> Dict[str, str]:
  """`key = value` lines of an obj.data."""
  result = {}
  for line in text.splitlines():
    key, sep, value = line.partition("=")
    if sep and key.strip() and not key.strip().startswith("#"):
      result[key.strip()] = value.strip()
  return result


def load_darknet(uri: str) -> YoloDataset:
  """A Darknet obj.data. Its paths (train=, valid=, names=) are relative to the directory
  darknet runs in: usually the parent of data/, where obj.data itself lives, so both that
  directory and its parent are tried."""
  try:
    fields = parse_darknet_data(read_text(uri, MAX_YAML_BYTES).decode("utf-8-sig"))
  except Exception as e:
    raise UsageError(f"cannot read {uri}: {type(e).__name__}: {e}") from None
  here = join_path(".", parent(uri))
  bases = [here, parent(here)]

  def locate(key: str) -> str:
    found = first_existing([join_path(b, fields[key]) for b in bases])
    if found is None:
      raise UsageError(f"{uri}: {key} = {fields[key]} exists neither under {bases[0]} nor "
                       f"under {bases[1]}")
    return found

  if not fields.get("names"):
    raise UsageError(f"{uri} has no names= line (the obj.names file)")
  names_text = read_text(locate("names"), MAX_YAML_BYTES).decode("utf-8-sig")
  names = parse_names([n.strip() for n in names_text.splitlines() if n.strip()],
                      fields["names"])
  splits = tuple((split, (locate(key),)) for key, split in DARKNET_SPLITS if fields.get(key))
  if not splits:
    raise UsageError(f"{uri} has neither train= nor valid=")
  # the darknet directory: where the relative paths in obj.data resolved
  root = next((b for b in bases if first_existing([join_path(b, fields["names"])])), here)
  return YoloDataset(posixpath.basename(uri.replace("\\", "/")), root, names, splits,
                     tuple(bases))


def load(uri: str, split: Optional[str] = None) -> YoloDataset:
  """A data.yaml / obj.data file, or a directory holding one. With `split`, every image the
  file names gets that split (one folder of a Roboflow export)."""
  if not uri.endswith((".yaml", ".yml", ".data")):
    found = detect_file(uri)
    if found is None:
      raise UsageError(f"{uri} holds no data.yaml or obj.data")
    uri = found
  dataset = load_darknet(uri) if uri.endswith(".data") else load_data_yaml(uri)
  if split:
    entries = tuple(sorted({e for _, es in dataset.splits for e in es}))
    dataset = dataclasses.replace(dataset, splits=((split, entries),))
  return dataset


def detect_file(directory: str) -> Optional[str]:
  """The YOLO description in a directory: data.yaml (or another .yaml with `names`), or a
  Darknet .data file."""
  _, files = list_dir(directory)
  for name in ("data.yaml", "data.yml", *DARKNET_NAMES):
    if name in files:
      return paths.join(directory, name)
  for name in files:
    if name.endswith(".data"):
      return paths.join(directory, name)
  return None
