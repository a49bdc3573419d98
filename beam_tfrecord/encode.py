"""One image from annotation to serialized Example: read bytes, probe/convert, encode.

Shared by both sinks. Pure apart from reading the file through Beam's FileSystems.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Callable, List, Mapping, Optional, Tuple

from beam_tfrecord import images, orientation
from beam_tfrecord.paths import is_remote
from beam_tfrecord.model import Box, ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord import schemas


DEFAULT_MAX_IMAGE_BYTES = 256 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class EncodeOptions:
  bbox_policy: str = "clip"                 # boxes.BBOX_POLICIES
  max_pixels: int = images.DEFAULT_MAX_PIXELS
  exif_frame: str = "auto"                  # orientation.EXIF_FRAMES
  verify_images: bool = False               # fully decode JPEG/PNG, not just check structure
  max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES  # larger files are rejected before reading
  schema: str = schemas.DEFAULT             # schemas.REGISTRY key
  include_masks: bool = False               # rasterize segmentations into image/object/mask
  preprocess: images.Preprocess = images.Preprocess()  # resize / re-encode at conversion time
  renames: Tuple[Tuple[str, str], ...] = ()  # --feature-names, (old, new) pairs


@dataclasses.dataclass
class Converted:
  records: Optional[List[bytes]]   # None when the image was rejected; per-object: 0..n
  labels: List[str]
  clipped: int
  reoriented: bool
  errors: List[ErrorRecord]

  @property
  def serialized(self) -> Optional[bytes]:
    """The one record of a one-record-per-image schema (None when rejected)."""
    return None if self.records is None else b"".join(self.records[:1])


def _too_large(uri: str, size: int, limit: int) -> InputError:
  return InputError("read", "image_too_large",
                    f"{uri} has {size} bytes, over --max-image-bytes {limit}")


def read_bytes(uri: str, limit: int = DEFAULT_MAX_IMAGE_BYTES, size: Optional[int] = None
               ) -> bytes:
  """The file's bytes; files over `limit` bytes are rejected from a stat, before reading.
  `size`: the file's size when already looked up (PrepareImages), which saves an object store
  a round trip."""
  if uri.startswith("gs://"):
    return _read_gcs(uri, limit, size)
  if not is_remote(uri):
    # Local fast path: Beam's LocalFileSystem.open read 2,000 images (180 MB) in 1.6 s under
    # cProfile (two reads per file, growing buffers); one os.read of the size from fstat
    # (+1, to see the end) took 11 us a 90 KB file where open().read() took 18-25 us.
    try:
      fd = os.open(uri, os.O_RDONLY | getattr(os, "O_BINARY", 0))
      try:
        size = os.fstat(fd).st_size
        if size > limit:
          raise _too_large(uri, size, limit)
        data = os.read(fd, size + 1)
        if len(data) <= size:
          return data
        chunks = [data]  # the file grew since fstat: read on to its end
        while chunks[-1]:
          chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
      finally:
        os.close(fd)
    except OSError as e:
      raise InputError("read", "unreadable", f"{uri}: {e.strerror or e}") from None
  from apache_beam.io.filesystems import FileSystems
  if size is None:  # a round trip, when PrepareImages did not look it up already
    try:
      size = FileSystems.get_filesystem(uri).size(uri)
    except Exception:
      size = None  # unknown here: the read below reports a missing object
  if size is not None and size > limit:
    raise _too_large(uri, size, limit)
  try:
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      return f.read()
  except Exception as e:  # missing since located, permission, network
    raise InputError("read", "unreadable", f"{uri}: {type(e).__name__}: {e}") from None


# HTTP connections kept per host by the Cloud Storage client: as many as read-ahead threads
# (shard_writer.REMOTE_READ_AHEAD) may ask at once. The default, 10, made urllib3 drop and
# reopen connections under 16 threads ("Connection pool is full").
GCS_CONNECTIONS = 32


@functools.lru_cache(maxsize=1)
def _gcs_client():
  """One Cloud Storage client per process, made as Beam's GcsIO makes it."""
  from apache_beam.io.gcp import gcsio
  client = gcsio.GcsIO().client
  try:
    import requests.adapters
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=GCS_CONNECTIONS)
    for scheme in ("https://", "http://"):
      client._http.mount(scheme, adapter)  # the client's requests session
  except Exception:  # another transport: keep its own pooling
    pass
  return client


def _read_gcs(uri: str, limit: int, size: Optional[int]) -> bytes:
  """One request per object: Beam's FileSystems.open reloads the object's metadata first, and
  the size check was a third request (20 ms per request, 200 images: the read-ahead of 16 went
  from 1.5x to 11.3x faster than reading one image at a time; benchmarks/gcs_latency.py).
  With the size known the whole object is downloaded and its CRC32C checked; without it, at
  most `limit` + 1 bytes (a range, which the server cannot checksum)."""
  from apache_beam.io.gcp.gcsio import parse_gcs_path
  if size is not None and size > limit:
    raise _too_large(uri, size, limit)
  try:
    bucket, name = parse_gcs_path(uri)
    blob = _gcs_client().bucket(bucket).blob(name)
    data = (blob.download_as_bytes(raw_download=True) if size is not None else
            blob.download_as_bytes(raw_download=True, start=0, end=limit))
  except Exception as e:  # missing since located, permission, network
    raise InputError("read", "unreadable", f"{uri}: {type(e).__name__}: {e}") from None
  if len(data) > limit:  # grew since it was located, or a range cut at limit + 1
    raise (_too_large(uri, len(data), limit) if size is not None else InputError(
        "read", "image_too_large", f"{uri} has more than {limit} bytes, over "
        f"--max-image-bytes {limit}"))
  return data


def _in_displayed_frame(ann: ImageAnnotation, prepared: images.PreparedImage,
                        options: EncodeOptions, errors: List[ErrorRecord]
                        ) -> Tuple[ImageAnnotation, str]:
  """Put the boxes in the frame of the written image; report a size that disagrees.
  Returns the annotation and the frame its coordinates were given in."""
  src = prepared.source
  frame = orientation.boxes_frame(src.orientation, (src.width, src.height),
                                  (ann.width, ann.height), options.exif_frame)
  expected = (src.width, src.height) if frame == "stored" else orientation.displayed_size(
      src.orientation, src.width, src.height)
  if ((ann.width is not None and ann.width != expected[0]) or
      (ann.height is not None and ann.height != expected[1])):
    errors.append(ErrorRecord(
        source=ann.source, stage="validate", reason="size_mismatch", key=ann.key, level="warning",
        message=f"annotation says {ann.width}x{ann.height}, image header says "
        f"{expected[0]}x{expected[1]}; the header is used"))
  if frame == "displayed" or src.orientation == 1:
    return ann, frame
  objects = tuple(dataclasses.replace(o, box=orientation.to_displayed(
      o.box, src.orientation, src.width, src.height)) for o in ann.objects)
  return ann.replace(objects=objects), frame


def _scaled(ann: ImageAnnotation, prepared: images.PreparedImage) -> ImageAnnotation:
  """Boxes and areas of the upright source image -> pixels of the written (resized) image.
  Normalized boxes are unchanged by this; `area` (pixels) scales by sx * sy."""
  src = prepared.source
  shown = orientation.displayed_size(src.orientation, src.width, src.height)
  sx, sy = prepared.info.width / shown[0], prepared.info.height / shown[1]
  if (sx, sy) == (1.0, 1.0):
    return ann
  return ann.replace(objects=tuple(dataclasses.replace(
      o, box=Box(o.box.xmin * sx, o.box.ymin * sy, o.box.xmax * sx, o.box.ymax * sy),
      area=None if o.area is None else o.area * sx * sy) for o in ann.objects))


def _with_masks(ann: ImageAnnotation, prepared: images.PreparedImage, frame: str,
                errors: List[ErrorRecord]) -> ImageAnnotation:
  """Rasterize each object's segmentation in the frame its coordinates are in, then move the
  mask as the image was moved (upright, resized). An unreadable segmentation drops its object
  (an object-level error), so masks and boxes stay aligned."""
  from beam_tfrecord import masks  # numpy: writer processes without masks never import it
  src = prepared.source
  if frame == "stored":
    size, turn = (src.width, src.height), src.orientation
  else:
    size, turn = orientation.displayed_size(src.orientation, src.width, src.height), 1
  final = (prepared.info.width, prepared.info.height)
  objects = []
  for obj in ann.objects:
    try:
      mask = masks.transform(masks.from_json(obj.segmentation, *size), turn, final)
    except InputError as e:
      errors.append(ErrorRecord(
          source=ann.source, stage=e.stage, reason=e.reason, key=ann.key, level="object",
          message=f"{obj.label!r} (annotation id {obj.id}): {e.message}"))
      continue
    objects.append(dataclasses.replace(obj, segmentation=None, mask=masks.encode_png(mask)))
  return ann.replace(objects=tuple(objects))


def fetch(uri: str, limit: int = DEFAULT_MAX_IMAGE_BYTES, size: Optional[int] = None
          ) -> Tuple[bytes, str]:
  """The image bytes and their hex SHA-256: both release the GIL, so the shard writer runs
  this on its read-ahead threads (the digest is `image/key/sha256` when the bytes pass through).
  Files over `limit` bytes are rejected from a stat before reading, as in read_bytes."""
  data = read_bytes(uri, limit, size)
  return data, hashlib.sha256(data).hexdigest()


def convert(ann: ImageAnnotation, label_map: Mapping[str, int],
            options: EncodeOptions = EncodeOptions(),
            fetched: Optional[Callable[[], Tuple[bytes, str]]] = None) -> Converted:
  """Never raises for bad input: every problem becomes an ErrorRecord. `fetched` returns
  fetch(ann.uri) (or raises InputError) when it ran ahead; by default it is called here."""
  errors: List[ErrorRecord] = []
  try:
    data, digest = (fetched() if fetched is not None else
                    (read_bytes(ann.uri, options.max_image_bytes, ann.size_bytes), None))
    prepared = images.prepare(data, options.max_pixels, options.verify_images,
                              options.preprocess)
    if digest is not None and prepared.encoded is data:  # written as read: the digest holds
      prepared = dataclasses.replace(prepared, sha256_hex=digest)
    ann, frame = _in_displayed_frame(ann, prepared, options, errors)
    if options.include_masks:
      ann = _with_masks(ann, prepared, frame, errors)
    ann = _scaled(ann, prepared)
    encoded = schemas.from_options(options).encode(ann, prepared, label_map, options)
  except InputError as e:
    return Converted(None, [], 0, False, errors + [e.record(ann.source, ann.key)])
  except Exception as e:  # a bug or an unforeseen input: report it, never kill the job
    return Converted(None, [], 0, False, errors + [ErrorRecord(
        source=ann.source, stage="encode", reason="unexpected_error", key=ann.key,
        message=f"{type(e).__name__}: {e}")])
  return Converted(encoded.records, encoded.labels, encoded.clipped,
                   prepared.source.orientation != 1, errors + encoded.errors)
