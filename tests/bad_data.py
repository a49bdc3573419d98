"""Generators of bad (and tricky good) inputs for the robustness tests, plus a run helper.

Everything is made here from Pillow, struct/zlib and plain text: no files from the network.
Used by the bad-input corpora (tests/e2e/test_bad_inputs_*.py), the property tests and
many conversion tests in every folder.
"""
from __future__ import annotations

import collections
import dataclasses
import glob
import io
import itertools
import json
import os
import struct
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

from PIL import Image, ImageDraw, ImageOps

# The local runner without the Prism download attempt of DirectRunner (same FnApiRunner).
RUNNER = "--runner=FnApiRunner"

BACKGROUND = (40, 160, 90)
MARKER = (230, 20, 30)

# --------------------------------------------------------------------------------------------
# Images


def solid(mode: str = "RGB", size: Tuple[int, int] = (64, 48), color: Any = None) -> Image.Image:
  """An image with a few flat rectangles, so that pixel comparisons mean something."""
  defaults = {"RGB": (200, 40, 40), "RGBA": (200, 40, 40, 128), "L": 90, "LA": (90, 200),
              "CMYK": (0, 200, 200, 0), "P": 1, "I;16": 40000}
  image = Image.new(mode, size, defaults[mode] if color is None else color)
  if mode == "P":
    image.putpalette([0, 0, 0, 250, 10, 10, 10, 250, 10, 10, 10, 250] + [0] * (256 * 3 - 12))
  draw = ImageDraw.Draw(image)
  second = {"RGB": (10, 30, 220), "RGBA": (10, 30, 220, 255), "L": 220, "LA": (220, 40),
            "CMYK": (200, 0, 0, 30), "P": 2, "I;16": 1000}[mode]
  if mode == "I;16":  # ImageDraw does not draw on I;16: paste a block instead
    image.paste(Image.new("I;16", (size[0] // 2, size[1] // 2), second), (2, 3))
  else:
    draw.rectangle([2, 3, size[0] // 2, size[1] // 2], fill=second)
  return image


def save(image: Image.Image, fmt: str, **params: Any) -> bytes:
  out = io.BytesIO()
  image.save(out, format=fmt, **params)
  return out.getvalue()


# Each image made here has its own bytes (a numbered JPEG comment or PNG text chunk, pixels
# alike): the same bytes under two names are reported as copies (duplicate_content), which
# the corpora do not mean to test.
_SERIAL = itertools.count()


def jpeg(size: Tuple[int, int] = (64, 48), mode: str = "RGB", color: Any = None,
         **params: Any) -> bytes:
  params.setdefault("comment", f"bad_data {next(_SERIAL)}".encode())
  return save(solid(mode, size, color), "JPEG", quality=92, **params)


def png(size: Tuple[int, int] = (64, 48), mode: str = "RGB", color: Any = None,
        **params: Any) -> bytes:
  if "pnginfo" not in params:
    from PIL import PngImagePlugin
    params["pnginfo"] = PngImagePlugin.PngInfo()
    params["pnginfo"].add_text("serial", str(next(_SERIAL)))
  return save(solid(mode, size, color), "PNG", **params)


def png_chunk(kind: bytes, data: bytes) -> bytes:
  return (struct.pack(">I", len(data)) + kind + data +
          struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png_signature() -> bytes:
  return b"\x89PNG\r\n\x1a\n"


def png16_rgb(size: Tuple[int, int] = (32, 24)) -> bytes:
  """A 16-bit-per-channel RGB PNG (Pillow cannot write one), built by hand."""
  width, height = size
  rows = []
  for y in range(height):
    row = bytearray(b"\x00")  # filter type None
    for x in range(width):
      r, g, b = (x * 2000) % 65536, (y * 2500) % 65536, 40000 if x < width // 2 else 5000
      row += struct.pack(">HHH", r, g, b)
    rows.append(bytes(row))
  ihdr = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
  return (png_signature() + png_chunk(b"IHDR", ihdr) +
          png_chunk(b"IDAT", zlib.compress(b"".join(rows))) + png_chunk(b"IEND", b""))


def png_bomb(width: int = 100_000, height: int = 100_000, garbage_idat: bool = True) -> bytes:
  """A small PNG whose IHDR claims width x height RGB pixels (a decompression bomb).

  With garbage_idat the pixel data is not even valid zlib; without, it is a valid (short)
  zlib stream of zeros.
  """
  ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
  idat = b"\x13\x37 not zlib at all " * 4 if garbage_idat else zlib.compress(b"\x00" * 4096, 9)
  return (png_signature() + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat) +
          png_chunk(b"IEND", b""))


def _png_chunk_offset(data: bytes, kind: bytes) -> tuple:
  """(offset of the chunk's data, its length) of the first `kind` chunk."""
  at = data.index(kind)
  (length,) = struct.unpack(">I", data[at - 4:at])
  return at + 4, length


def png_bad_zlib(size: Tuple[int, int] = (64, 48)) -> bytes:
  """A PNG with intact structure (IHDR ... IEND, valid CRCs) whose pixel data is not zlib."""
  data = png(size)
  start, length = _png_chunk_offset(data, b"IDAT")
  body = b"\x00" * length
  crc = struct.pack(">I", zlib.crc32(b"IDAT" + body) & 0xFFFFFFFF)
  return data[:start] + body + crc + data[start + length + 4:]


def png_bad_crc(size: Tuple[int, int] = (64, 48)) -> bytes:
  """A PNG whose pixel data is fine but whose IDAT CRC is wrong (libpng, hence TF, refuses
  it; Pillow's load() does not check CRCs)."""
  data = png(size)
  start, length = _png_chunk_offset(data, b"IDAT")
  at = start + length
  return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def truncated_half(data: bytes) -> bytes:
  return data[: len(data) // 2]


def truncated_tail(data: bytes, cut: int = 2) -> bytes:
  """Cut just before the end: the header is intact, the end-of-image marker is gone."""
  return data[:-cut]


def other_formats() -> Dict[str, Tuple[bytes, str]]:
  """{name: (bytes, Pillow mode the pixels should be compared in)} for formats that the
  library re-encodes as PNG."""
  gif_src = solid("P", (40, 30))
  second = solid("P", (40, 30), color=3)
  return {
      "gif": (save(gif_src, "GIF"), "RGB"),
      "animated_gif": (save(gif_src, "GIF", save_all=True, append_images=[second],
                            duration=100, loop=0), "RGB"),
      "bmp": (save(solid("RGB", (40, 30)), "BMP"), "RGB"),
      "webp": (save(solid("RGBA", (40, 30)), "WEBP", lossless=True), "RGBA"),
      "tiff": (save(solid("RGB", (40, 30)), "TIFF"), "RGB"),
  }


# EXIF orientation -> the transpose that turns the displayed picture into the stored pixels
# (the inverse of what a viewer, or ImageOps.exif_transpose, applies).
_TO_STORED = {1: None, 3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90,
              8: Image.Transpose.ROTATE_270}


def marker_bbox(image: Image.Image, color=MARKER, tolerance: int = 60) -> Tuple[int, int, int, int]:
  """Pixel-edge bounding box (xmin, ymin, xmax, ymax) of the pixels close to `color`."""
  import numpy as np
  array = np.asarray(image.convert("RGB")).astype(int)
  close = (np.abs(array - np.array(color)).max(axis=-1) <= tolerance)
  ys, xs = np.nonzero(close)
  return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


@dataclasses.dataclass
class OrientedPhoto:
  data: bytes
  orientation: int
  displayed_size: Tuple[int, int]          # (width, height) as a viewer shows it
  stored_size: Tuple[int, int]             # (width, height) of the raw pixels
  displayed_box: Tuple[int, int, int, int]  # the marker, in the displayed frame
  stored_box: Tuple[int, int, int, int]     # the marker, in the stored frame


def oriented_photo(orientation: int, displayed_size=(96, 64), box=(12, 8, 44, 30),
                   fmt: str = "JPEG") -> OrientedPhoto:
  """A photo with EXIF orientation whose *displayed* picture has a MARKER rectangle at `box`."""
  shown = Image.new("RGB", displayed_size, BACKGROUND)
  ImageDraw.Draw(shown).rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=MARKER)
  method = _TO_STORED[orientation]
  stored = shown.transpose(method) if method is not None else shown.copy()
  exif = Image.Exif()
  exif[0x0112] = orientation
  params = {"quality": 95, "subsampling": 0} if fmt == "JPEG" else {}
  data = save(stored, fmt, exif=exif.tobytes(), **params)
  # Sanity of the generator itself: a viewer shows `shown`.
  with Image.open(io.BytesIO(data)) as check:
    assert check.getexif().get(0x0112) == orientation
    upright = ImageOps.exif_transpose(check)
    assert upright.size == displayed_size
    assert marker_bbox(upright) == box, (marker_bbox(upright), box)
    stored_box = marker_bbox(check)
  return OrientedPhoto(data, orientation, displayed_size, stored.size, box, stored_box)


# --------------------------------------------------------------------------------------------
# Annotation files


class Coco:
  """Builds one COCO instances JSON and the image files it names."""

  def __init__(self, image_root: str, categories: Sequence[Tuple[int, str]]):
    self.image_root = image_root
    self.images: List[Any] = []
    self.annotations: List[Any] = []
    self.categories: List[Any] = [{"id": i, "name": n, "supercategory": "x"}
                                  for i, n in categories]
    self._next_ann = 1

  def image(self, image_id: Any, file_name: Any, data: Optional[bytes] = None,
            width: Any = None, height: Any = None, write_file: bool = True,
            **extra: Any) -> Dict:
    entry: Dict[str, Any] = {"id": image_id, "file_name": file_name}
    if width is not None:
      entry["width"] = width
    if height is not None:
      entry["height"] = height
    entry.update(extra)
    self.images.append(entry)
    if data is not None and write_file:
      write_bytes(os.path.join(self.image_root, file_name), data)
    return entry

  def ann(self, image_id: Any, category_id: Any, bbox: Any, **extra: Any) -> Dict:
    entry = {"id": self._next_ann, "image_id": image_id, "category_id": category_id,
             "bbox": bbox, "iscrowd": 0}
    entry.update(extra)
    self._next_ann += 1
    self.annotations.append(entry)
    return entry

  def document(self, order=("images", "annotations", "categories")) -> Dict:
    doc: Dict[str, Any] = {"info": {"description": "robustness corpus"}}
    for section in order:
      doc[section] = getattr(self, section)
    return doc

  def write(self, path: str, order=("images", "annotations", "categories")) -> str:
    text = json.dumps(self.document(order), ensure_ascii=False, indent=1)
    write_bytes(path, text.encode("utf-8"))
    return path


def voc_xml(filename: Optional[str], objects: Sequence[Dict[str, Any]] = (),
            size: Optional[Tuple[Any, Any]] = None, root_tag: str = "annotation",
            prolog: str = "") -> bytes:
  """A Pascal VOC annotation; object dicts: name, xmin, ymin, xmax, ymax (+ difficult...).
  Values are inserted raw (escape them yourself when needed)."""
  from xml.sax.saxutils import escape
  parts = [prolog, f"<{root_tag}><folder>VOC</folder>"]
  if filename is not None:
    parts.append(f"<filename>{escape(filename)}</filename>")
  if size is not None:
    parts.append(f"<size><width>{size[0]}</width><height>{size[1]}</height>"
                 "<depth>3</depth></size>")
  for obj in objects:
    parts.append("<object>")
    if obj.get("name") is not None:
      parts.append(f"<name>{escape(str(obj['name']))}</name>")
    for tag in ("pose", "truncated", "difficult"):
      if tag in obj:
        parts.append(f"<{tag}>{obj[tag]}</{tag}>")
    if any(k in obj for k in ("xmin", "ymin", "xmax", "ymax")):
      parts.append("<bndbox>" + "".join(f"<{k}>{obj[k]}</{k}>" for k in
                                         ("xmin", "ymin", "xmax", "ymax") if k in obj)
                   + "</bndbox>")
    parts.append("</object>")
  parts.append(f"</{root_tag}>")
  return "".join(parts).encode("utf-8")


BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + "".join(f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
              for i in range(1, 10))
    + ']>\n')


def billion_laughs_xml(filename: str) -> bytes:
  return (BILLION_LAUGHS + f"<annotation><filename>{filename}</filename><object><name>&lol9;"
          "</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox>"
          "</object></annotation>").encode()


def external_entity_xml(filename: str, target: str = "file:///etc/passwd") -> bytes:
  return (f'<?xml version="1.0"?>\n<!DOCTYPE annotation [ <!ENTITY xxe SYSTEM "{target}"> ]>\n'
          f"<annotation><filename>{filename}</filename><object><name>&xxe;</name><bndbox>"
          "<xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>"
          "</annotation>").encode()


def write_bytes(path: str, data: bytes) -> str:
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "wb") as f:
    f.write(data)
  return path


# --------------------------------------------------------------------------------------------
# Running a conversion and reading everything it wrote


@dataclasses.dataclass
class Run:
  code: int
  output: str
  manifest: Optional[Dict]
  errors: List[Dict]
  examples: List[Dict]     # parsed examples of all splits, python values
  stdout: str = ""
  stderr: str = ""

  def by_filename(self) -> Dict[str, Dict]:
    result = {}
    for example in self.examples:
      assert example["filename"] not in result, f"{example['filename']} written twice"
      result[example["filename"]] = example
    return result

  def errors_where(self, **fields: Any) -> List[Dict]:
    return [e for e in self.errors if all(e.get(k) == v for k, v in fields.items())]

  def errors_about(self, text: str) -> List[Dict]:
    """Errors whose key or source contains `text`."""
    return [e for e in self.errors if text in (e.get("key") or "") or text in e["source"]]

  def level_counts(self) -> collections.Counter:
    return collections.Counter(e["level"] for e in self.errors)


def read_errors(output: str) -> List[Dict]:
  errors = []
  for path in sorted(glob.glob(os.path.join(output, "errors-*.jsonl"))):
    with open(path, encoding="utf-8") as f:
      errors.extend(json.loads(line) for line in f if line.strip())
  return errors


def read_examples(output: str, manifest: Dict) -> List[Dict]:
  """Every example of every split, parsed with tf.io.parse_single_example (reader.load)."""
  from beam_tfrecord import reader
  result = []
  for split in manifest["splits"]:
    for record in reader.load(output, split):
      example = {k: v.numpy() for k, v in record.items()}
      example = {k: (v.tolist() if hasattr(v, "tolist") and getattr(v, "ndim", 0) else v)
                 for k, v in example.items()}
      example["split"] = split
      if "image/filename" in record:  # od-api (other schemas have no file name key)
        example["filename"] = record["image/filename"].numpy().decode("utf-8")
      result.append(example)
  return result


def convert(args: Sequence[str], capsys=None) -> Run:
  """beam_tfrecord.cli.main(['convert', *args]) and everything it left in --output."""
  from beam_tfrecord import cli
  args = list(args)
  if not any(a.startswith("--runner") for a in args):
    args.append(RUNNER)
  output = args[args.index("--output") + 1]
  code = cli.main(["convert", *args])
  stdout = stderr = ""
  if capsys is not None:
    captured = capsys.readouterr()
    stdout, stderr = captured.out, captured.err
  manifest = None
  if code != 0:  # a failed run leaves the output alone; its report is its run directory
    reports = sorted(glob.glob(os.path.join(output, ".beam-tfrecord-run-*", "manifest.json")),
                     key=os.path.getmtime)
    if reports:
      output = os.path.dirname(reports[-1])
  if os.path.exists(os.path.join(output, "manifest.json")):
    with open(os.path.join(output, "manifest.json"), encoding="utf-8") as f:
      manifest = json.load(f)
  examples = read_examples(output, manifest) if manifest else []
  return Run(code, output, manifest, read_errors(output), examples, stdout, stderr)


def decode(encoded: bytes, channels: int = 0):
  """tf.io.decode_image as a numpy array (first frame)."""
  import tensorflow as tf
  return tf.io.decode_image(encoded, channels=channels, expand_animations=False).numpy()
