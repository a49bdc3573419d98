"""Resolve file names from annotation files safely inside an image root."""
from __future__ import annotations

import functools
import os
import posixpath
import re
import stat
from typing import Optional, Sequence, Tuple

from beam_tfrecord.records.model import InputError

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_DRIVE = re.compile(r"^[a-zA-Z]:/")


def is_remote(uri: str) -> bool:
  # the substring test first: called a few times per image, and most paths are local
  return "://" in uri and bool(_SCHEME.match(uri))


def join(root: str, name: str) -> str:
  if is_remote(root):
    return root.rstrip("/") + "/" + name
  return os.path.join(root, name)


class UnsafeName(ValueError):
  """A name that is not a plain entry directly inside a directory (see plain_name)."""


def plain_name(name: object) -> str:
  """`name` itself when it names an entry directly inside a directory, else UnsafeName.

  Every path the tool writes, renames or deletes in an output is such a name joined to the
  output (or its run directory), checked where the operation happens: names come from
  manifests, journals and --shard-name-template, which anyone can edit or get wrong, and a
  separator, '..' or an absolute name would reach outside.
  """
  if not isinstance(name, str):
    raise UnsafeName(f"{name!r} is not a file name")
  if name in ("", ".", ".."):
    raise UnsafeName(f"{name!r} is not a file name")
  if "/" in name or "\\" in name or "\x00" in name:
    raise UnsafeName(f"{name!r} is not a plain file name (it has a separator or a NUL byte)")
  if re.match(r"^[a-zA-Z]:", name):  # a drive on Windows: 'C:x' leaves the directory there
    raise UnsafeName(f"{name!r} is not a plain file name (it names a drive)")
  return name


def child(directory: str, name: object) -> str:
  """directory/name, for a name that plain_name accepts (UnsafeName otherwise)."""
  return join(directory, plain_name(name))


def clean_name(name: object) -> str:
  """Normalise a relative file name from an annotation; reject anything that could escape.

  Returns the posix-normalised relative name (used as the image key).
  """
  if not isinstance(name, str) or not name.strip():
    raise InputError("parse", "missing_filename", f"file name {name!r} is empty or not text")
  try:
    name.encode("utf-8")
  except UnicodeEncodeError:
    raise InputError("locate", "unsafe_path", f"file name {name!r} is not valid Unicode") from None
  if "\x00" in name:
    raise InputError("locate", "unsafe_path", f"file name {name!r} contains a NUL byte")
  text = name.replace("\\", "/")
  if text.startswith("/") or is_remote(text) or (text[1:2] == ":" and _DRIVE.match(text)):
    raise InputError("locate", "absolute_path",
                     f"file name {name!r} is absolute; it must be relative to the image root")
  if ("//" not in text and "/." not in text and not text.startswith(".")
      and not text.endswith("/")):
    return text  # nothing normpath would change (it cost 2 us an image)
  normalized = posixpath.normpath(text)
  if normalized == ".." or normalized.startswith("../"):
    raise InputError("locate", "path_traversal",
                     f"file name {name!r} points outside the image root")
  return normalized


def resolve(root: str, name: str, allow_absolute: bool = False,
            follow_symlinks: bool = False) -> tuple[str, str]:
  key, uri, _ = resolve_sized(root, name, allow_absolute, follow_symlinks)
  return key, uri


def resolve_sized(root: str, name: str, allow_absolute: bool = False,
                  follow_symlinks: bool = False) -> tuple[str, str, Optional[int]]:
  """(key, uri, size) for a file name from an annotation, guaranteed inside `root`; size is
  the file's size when resolving saw it (a plain regular file), else None.

  With allow_absolute, names that are full URIs or absolute paths are taken as they are
  (for CSVs that list gs://bucket/... paths); the key is then the full name. A name that is a
  symlink leading out of `root` is refused unless follow_symlinks, which accepts links whose
  target is a readable file (symlink farms for splits, exports assembled with `ln -s`).
  """
  if allow_absolute and isinstance(name, str) and (is_remote(name) or name.startswith("/")):
    return name, name, None
  key = clean_name(name)
  remote, prefix, real_root = _root_of(root)
  uri = prefix + key  # join(root, key): key is relative and clean
  size = None
  if not remote:
    plain = _plain_path_inside(real_root, key)
    if plain:
      real, size = plain
    else:
      real = os.path.realpath(uri)
    if not inside(real, real_root):
      if not follow_symlinks:
        raise InputError("locate", "symlink_escape",
                         f"{name!r} resolves to {real}, outside the image root {real_root}; "
                         "pass --follow-symlinks to accept symlinked images")
      if not (os.path.isfile(real) and os.access(real, os.R_OK)):
        raise InputError("locate", "symlink_escape",
                         f"{name!r} is a symlink to {real}, which is not a readable file")
  return key, uri, size


@functools.lru_cache(maxsize=256)
def _root_of(root: str) -> Tuple[bool, str, Optional[str]]:
  """(remote, what a clean relative name is appended to as join() would join it, the
  realpath of a local root) of an image root, once per root and run (a join per image was
  ~2 us of resolve_sized's)."""
  if is_remote(root):
    return True, root.rstrip("/") + "/", None
  return False, os.path.join(root, ""), _realpath_of_root(root)


@functools.lru_cache(maxsize=256)
def _realpath_of_root(root: str) -> str:
  """realpath of an image root, once per run and root (it lstats every component: resolving
  roots per image was 80 µs of the 110 µs that resolve took for each of 20,000 images).
  pipeline.build forgets them (forget_roots): a long-lived process (a scheduler's) converts
  again after a root symlink such as `current` was moved to a new export."""
  return os.path.realpath(root)


def real_root(root: str) -> str:
  """The realpath of an image root, cached as resolve caches it (storage/files.read_bytes
  checks a symlinked image against it again when it reads the image)."""
  return _realpath_of_root(root)


def under(path: str, root: Optional[str]) -> bool:
  """Whether `path` is `root` or below it, by its text ('/' and '\\' alike; no root: False).
  For listings and URIs; real paths on disk use inside()."""
  if not root:
    return False
  path, root = path.replace("\\", "/").rstrip("/"), root.replace("\\", "/").rstrip("/")
  return path == root or path.startswith(root + "/")


def same_location(a: str, b: str) -> bool:
  """Whether two directory paths name the same place (local: their real paths)."""
  if is_remote(a) or is_remote(b):
    return a.rstrip("/") == b.rstrip("/")
  return os.path.realpath(a) == os.path.realpath(b)


def inside(real: str, real_root: str) -> bool:
  """Whether the real path `real` is `real_root` or lies below it (both realpaths)."""
  return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def forget_roots() -> None:
  """Resolve image roots afresh from now on (at the start of each run)."""
  _realpath_of_root.cache_clear()
  _root_of.cache_clear()


def _plain_path_inside(real_root: str, key: str) -> Optional[Tuple[str, Optional[int]]]:
  """(real_root/key, its size if it is a regular file, else None) when none of the key's
  components is a symlink (then that path is what realpath gives), else None; also None when
  a component is missing (realpath decides then, and Locate reports the missing file)."""
  base = real_root if real_root.endswith(os.sep) else real_root + os.sep
  if "/" not in key:  # one lstat, the usual flat image folder: no os.path.join
    steps: Sequence[str] = (base + key,)
  else:
    parts = key.split("/")
    steps = [base + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
  for path in steps:
    try:
      info = os.lstat(path)
    except OSError:
      return None
    if stat.S_ISLNK(info.st_mode):
      return None
  return path, (info.st_size if stat.S_ISREG(info.st_mode) else None)


def file_size(uri: str) -> int:
  """Size of an existing file; InputError('locate', 'missing_image') when absent."""
  if not is_remote(uri):
    try:
      st = os.stat(uri)
    except OSError as e:
      raise InputError("locate", "missing_image", f"{uri}: {e.strerror}") from None
    if not os.path.isfile(uri):
      raise InputError("locate", "missing_image", f"{uri} is not a file")
    return st.st_size
  from apache_beam.io.filesystems import FileSystems
  try:
    results = FileSystems.match([uri])[0].metadata_list
  except Exception as e:  # BeamIOError for missing objects
    raise InputError("locate", "missing_image", f"{uri}: {e}") from None
  for meta in results:
    if meta.path == uri:
      return meta.size_in_bytes
  raise InputError("locate", "missing_image", f"{uri} does not exist")


def size_of(uri: str) -> int:
  """Size of a file we just wrote. Not FileSystems.match, which would read '[', '*', '?' in
  the path as a glob pattern."""
  if not is_remote(uri):
    return os.path.getsize(uri)  # what Beam's LocalFileSystem.metadata reports
  from apache_beam.io.filesystems import FileSystems
  return FileSystems.get_filesystem(uri).metadata(uri).size_in_bytes


def glob_escape(root: str) -> str:
  """A directory path made literal for use in front of a glob pattern."""
  import glob
  return root if is_remote(root) else glob.escape(root)


def absolute(uri: str) -> str:
  """A local path made absolute and normalised (os.path.abspath: no link is resolved); a URI
  as it is. An image's identity holds the path it was found under, so the same files typed
  relative in one run and absolute in the next must give the same path."""
  return uri if not uri or is_remote(uri) else os.path.abspath(uri)


def absolute_assignment(text: str) -> str:
  """'[SPLIT=]PATH' with PATH made absolute (absolute)."""
  split, uri = parse_assignment(text)
  return f"{split}={absolute(uri)}" if split else absolute(uri)


def parse_assignment(text: str) -> tuple[Optional[str], str]:
  """'train=path' -> ('train', 'path'); 'path' -> (None, 'path'). URIs keep their '='."""
  name, sep, rest = text.partition("=")
  if sep and name and re.fullmatch(r"[A-Za-z0-9_.-]+", name) and not is_remote(text):
    return name, rest
  return None, text
