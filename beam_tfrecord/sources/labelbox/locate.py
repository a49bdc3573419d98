"""Where a Labelbox data row's image is: a name under the image root, else (with
--allow-absolute-paths) its row_data path; a URL is never fetched. Beam-free."""
from __future__ import annotations

import os
from typing import Tuple

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources.labelbox.data_row import DataRow
from beam_tfrecord.storage import paths


def is_url(text: str) -> bool:
  return text.lower().startswith(("http://", "https://"))


def locate(row: DataRow, image_root: str, allow_absolute: bool = False,
           follow_symlinks: bool = False, exists=None) -> Tuple[str, str]:
  """(key, uri) of a data row's image: the first of its candidate names that exists under
  `image_root`; else its row_data when that is a gs://, s3:// or local absolute path (with
  allow_absolute). InputError: missing_image, unreachable_url (an http(s) row_data: never
  fetched), absolute_path (row_data outside the root without allow_absolute)."""
  if exists is None:
    from beam_tfrecord.storage.files import exists
  tried, refused = [], []
  for field, name in row.candidates:
    try:
      key, uri = paths.resolve(image_root, name, False, follow_symlinks)
    except InputError as e:  # absolute, '..', a symlink out: never read, said below
      refused.append(f"{field} {name!r} ({e.reason})")
      continue
    if exists(uri):
      return key, uri
    tried.append(f"{field} {name!r}")
  looked = (f"none of {', '.join(tried)} is under {image_root}" if tried else
            f"it names no file to look for under {image_root}")
  if refused:
    looked += f" (not looked up: {', '.join(refused)})"
  data = row.row_data
  if data and is_url(data):
    raise InputError("locate", "unreachable_url", f"row_data {data} is a URL this tool does not "
                     f"fetch, and {looked}: download the images and give their folder as "
                     "--images")
  if data and (paths.is_remote(data) or os.path.isabs(data)):
    if not allow_absolute:
      raise InputError("locate", "absolute_path", f"{looked}; row_data {data} lies outside "
                       "the image root and is read only with --allow-absolute-paths")
    return paths.resolve(image_root, data, True, follow_symlinks)
  raise InputError("locate", "missing_image", f"{looked}; give --images DIR, the folder "
                   "holding the images")
