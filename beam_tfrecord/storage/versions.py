"""A versioned output (`convert --append`): DEST/versions/<V>/ are ordinary outputs, DEST/LATEST
names the published one. Names, reading LATEST without trusting it, and listing versions.
Pure and Beam-free for local paths (gs:// goes through Beam's FileSystems and the storage
client).

    DEST/
      LATEST                 one line, `versions/00000003`: the version readers use
      versions/00000001/     shards, manifest.json, label map, card, errors, catalog
      versions/00000003/
      .beam-tfrecord-lock    while a run holds DEST
      .beam-tfrecord-run-*/  a run's staging (removed when it publishes or fails)

LATEST is written last, only after the new version verified, with a rename (locally) or a
generation precondition (gs://): readers see the old version or the new one, never a mix.
A version is never changed once published; files a version shares with the one before it
are hard links (locally, made read-only) or server-side copies (gs://).
"""
from __future__ import annotations

import os
import re
import stat
from typing import List, Optional, Tuple

from beam_tfrecord.records.model import InputError
from beam_tfrecord.storage import files, paths

LATEST = "LATEST"
VERSIONS = "versions"
DIGITS = 8
_LATEST_TEXT = re.compile(r"versions/([0-9]{8})\n?")   # fullmatch: ASCII digits, one newline
_NAME = re.compile(r"[0-9]{8}")
MAX_LATEST_BYTES = 4096


class DamagedVersions(ValueError):
  """LATEST or versions/ is not what this tool writes (a link, a bad name, not a file)."""


def version_name(number: int) -> str:
  return f"{number:0{DIGITS}d}"


def version_dir(dest: str, number: int) -> str:
  return paths.join(paths.join(dest, VERSIONS), version_name(number))


def is_version_name(name: str) -> bool:
  """True for a name version_name gives: exactly 8 ASCII digits."""
  return bool(_NAME.fullmatch(name))


def label(number: int) -> str:
  """`versions/00000003`: how LATEST and the read-only commands name a version."""
  return f"{VERSIONS}/{version_name(number)}"


def latest_text(number: int) -> bytes:
  return f"{VERSIONS}/{version_name(number)}\n".encode()


def parse_latest(data: bytes) -> int:
  """The version number LATEST names; DamagedVersions unless it is exactly what we write."""
  try:
    text = data.decode("ascii")
  except UnicodeDecodeError:
    raise DamagedVersions("LATEST is not text") from None
  match = _LATEST_TEXT.fullmatch(text)
  if not match:
    raise DamagedVersions(f"LATEST holds {text[:60]!r}, not versions/<{DIGITS} digits>")
  return int(match.group(1))


def _lstat_kind(path: str) -> Optional[int]:
  try:
    return stat.S_IFMT(os.lstat(path).st_mode)
  except (FileNotFoundError, NotADirectoryError):
    return None


def _check_real_dir(path: str, what: str) -> None:
  kind = _lstat_kind(path)
  if kind != stat.S_IFDIR:
    raise DamagedVersions(f"{what} {path} is "
                          + ("missing" if kind is None else "a link or not a directory"))


def read_latest(dest: str) -> Optional[int]:
  """The number LATEST names, None when DEST has no LATEST. Locally LATEST must be a regular
  file (opened without following a link, never a FIFO) and its version a real directory
  inside DEST/versions, itself a real directory (also when there is no LATEST yet);
  DamagedVersions otherwise."""
  uri = paths.join(dest, LATEST)
  if paths.is_remote(dest):
    from apache_beam.io.filesystems import FileSystems
    if not FileSystems.exists(uri):
      return None
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      number = _parsed(dest, f.read(MAX_LATEST_BYTES + 1))
    if not FileSystems.exists(paths.join(version_dir(dest, number), "manifest.json")):
      raise DamagedVersions(f"{dest}: LATEST names {label(number)}, which has no manifest.json")
    return number
  try:
    with files.open_local(uri, follow=False) as f:
      data = f.read(MAX_LATEST_BYTES + 1)
  except (FileNotFoundError, NotADirectoryError):  # no LATEST, or DEST is not a directory
    if _lstat_kind(paths.join(dest, VERSIONS)) not in (None, stat.S_IFDIR):
      # nothing published yet, but versions/ is a link (or a file): never list or write there
      _check_real_dir(paths.join(dest, VERSIONS), "the versions folder")
    return None
  except InputError:  # a FIFO, a directory: never waited on
    raise DamagedVersions(f"LATEST in {dest} is not a regular file") from None
  except OSError as e:  # ELOOP: a symlink
    raise DamagedVersions(f"LATEST in {dest} cannot be opened as a plain file "
                          f"({e.strerror})") from None
  number = _parsed(dest, data)
  _check_real_dir(paths.join(dest, VERSIONS), "the versions folder")
  _check_real_dir(version_dir(dest, number), "the version LATEST names,")
  return number


def _parsed(dest: str, data: bytes) -> int:
  try:
    return parse_latest(data)
  except DamagedVersions as e:
    raise DamagedVersions(f"{dest}: {e}") from None


def is_versioned(dest: str) -> bool:
  """True when DEST looks like a versioned output (it has LATEST or versions/)."""
  if paths.is_remote(dest):
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.exists(paths.join(dest, LATEST))
  return (_lstat_kind(paths.join(dest, LATEST)) is not None or
          _lstat_kind(paths.join(dest, VERSIONS)) is not None)


def resolve(path: str) -> str:
  """What a reader should open: the version LATEST names when `path` is a versioned output
  (resolved once), else `path` itself (an ordinary output or a version directory)."""
  number = read_latest(path)
  return path if number is None else version_dir(path, number)


def locate(path: str) -> Tuple[str, Optional[int]]:
  """(what a reader should open, the version number or None): resolve() that also says
  which version it chose, for the read-only commands to name it. LATEST is read once."""
  number = read_latest(path)
  return (path, None) if number is None else (version_dir(path, number), number)


def numbers(dest: str) -> List[int]:
  """The version numbers present under DEST/versions (published or not), sorted. Names that
  are not ours are left out (they are never touched)."""
  root = paths.join(dest, VERSIONS)
  if paths.is_remote(dest):
    from apache_beam.io.filesystems import FileSystems
    try:
      found = FileSystems.match([paths.glob_escape(root) + "/*/manifest.json"])[0].metadata_list
    except Exception:
      return []
    names = {m.path[len(root) + 1:].split("/", 1)[0] for m in found}
  else:
    kind = _lstat_kind(root)
    if kind is None:
      return []
    if kind != stat.S_IFDIR:  # a link to elsewhere: never list (or later delete) its entries
      raise DamagedVersions(f"the versions folder {root} is a link or not a directory")
    names = {e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)}
  return sorted(int(n) for n in names if is_version_name(n))


def split_version(path: str) -> Tuple[str, Optional[int]]:
  """(DEST, number) when `path` is DEST/versions/<V>, else (path, None)."""
  clean = path.rstrip("/").rstrip(os.sep)
  parent, name = os.path.split(clean) if not paths.is_remote(clean) else clean.rsplit("/", 1)
  grand, folder = (os.path.split(parent) if not paths.is_remote(parent)
                   else parent.rsplit("/", 1))
  if folder == VERSIONS and is_version_name(name):
    return grand or ".", int(name)
  return path, None
