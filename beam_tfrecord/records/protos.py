"""tf.train.Example and the TF OD API's StringIntLabelMap as protobuf classes, without TensorFlow.

Importing TensorFlow costs each Beam worker ~3.5 s and ~560 MB (see DESIGN.md), only to get two
protobuf messages. These declarations mirror tensorflow/core/example/{example,feature}.proto and
object_detection/protos/string_int_label_map.proto field for field (same package, names and
numbers, packed repeated scalars), so protobuf itself does the encoding and the bytes equal
`tf.train.Example(...).SerializeToString(deterministic=True)` (asserted in tests).
They live in a private descriptor pool so they never clash with TensorFlow's own classes.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _message(file: descriptor_pb2.FileDescriptorProto, name: str, fields, nested=()):
  msg = file.message_type.add(name=name)
  for number, (field_name, kind, label, type_name, packed) in enumerate(fields, start=1):
    field = msg.field.add(name=field_name, number=number, type=kind, label=label)
    if type_name:
      field.type_name = type_name
    if packed:
      field.options.packed = True
  for nested_msg in nested:
    msg.nested_type.add().CopyFrom(nested_msg)
  return msg


def _build_pool() -> descriptor_pool.DescriptorPool:
  pool = descriptor_pool.DescriptorPool()
  rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL

  feature = descriptor_pb2.FileDescriptorProto(
      name="beam_tfrecord/feature.proto", package="tensorflow", syntax="proto3")
  _message(feature, "BytesList", [("value", _F.TYPE_BYTES, rep, None, False)])
  _message(feature, "FloatList", [("value", _F.TYPE_FLOAT, rep, None, True)])
  _message(feature, "Int64List", [("value", _F.TYPE_INT64, rep, None, True)])
  feat = _message(feature, "Feature", [
      ("bytes_list", _F.TYPE_MESSAGE, opt, ".tensorflow.BytesList", False),
      ("float_list", _F.TYPE_MESSAGE, opt, ".tensorflow.FloatList", False),
      ("int64_list", _F.TYPE_MESSAGE, opt, ".tensorflow.Int64List", False),
  ])
  feat.oneof_decl.add(name="kind")
  for field in feat.field:
    field.oneof_index = 0
  entry = descriptor_pb2.DescriptorProto(name="FeatureEntry")
  entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=opt)
  entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, label=opt,
                  type_name=".tensorflow.Feature")
  entry.options.map_entry = True
  _message(feature, "Features",
           [("feature", _F.TYPE_MESSAGE, rep, ".tensorflow.Features.FeatureEntry", False)],
           nested=[entry])
  pool.Add(feature)

  example = descriptor_pb2.FileDescriptorProto(
      name="beam_tfrecord/example.proto", package="tensorflow", syntax="proto3",
      dependency=["beam_tfrecord/feature.proto"])
  _message(example, "Example",
           [("features", _F.TYPE_MESSAGE, opt, ".tensorflow.Features", False)])
  pool.Add(example)

  label_map = descriptor_pb2.FileDescriptorProto(
      name="beam_tfrecord/string_int_label_map.proto", package="object_detection.protos",
      syntax="proto2")
  item = label_map.message_type.add(name="StringIntLabelMapItem")
  item.field.add(name="name", number=1, type=_F.TYPE_STRING, label=opt)
  item.field.add(name="id", number=2, type=_F.TYPE_INT32, label=opt)
  item.field.add(name="display_name", number=3, type=_F.TYPE_STRING, label=opt)
  label_map.message_type.add(name="StringIntLabelMap").field.add(
      name="item", number=1, type=_F.TYPE_MESSAGE, label=rep,
      type_name=".object_detection.protos.StringIntLabelMapItem")
  pool.Add(label_map)
  return pool


_POOL = _build_pool()


def _cls(full_name: str):
  return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


Example = _cls("tensorflow.Example")
Features = _cls("tensorflow.Features")
Feature = _cls("tensorflow.Feature")
StringIntLabelMap = _cls("object_detection.protos.StringIntLabelMap")


# ---------------------------------------------------------------------------------------------
# A direct encoder for tf.train.Example: building the message through protobuf's dict
# constructors cost ~0.3 ms per image (DESIGN.md); writing the wire format from a precomputed
# layout costs a tenth of that. The bytes equal Example.SerializeToString(deterministic=True)
# (map entries sorted by key, packed scalars), asserted in tests; anything the fast path is not
# sure to encode identically (non-finite floats, out-of-range ints) goes through protobuf.

import math as _math
import struct as _struct

BYTES, FLOATS, INTS = "bytes", "floats", "ints"
_KIND_TAG = {BYTES: b"\x0a", FLOATS: b"\x12", INTS: b"\x1a"}  # Feature's oneof field tags


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def _varint(value: int) -> bytes:
  if value < 0x80:
    return _ONE_BYTE[value]
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _packed_ints(values) -> bytes:
  out = bytearray()
  for value in values:
    if value < 0:
      value &= 0xFFFFFFFFFFFFFFFF
    while value > 0x7F:
      out.append((value & 0x7F) | 0x80)
      value >>= 7
    out.append(value)
  return bytes(out)


def _small_payload(kind: str, values) -> bytes:
  """The packed inner list of a FLOATS or INTS feature (empty for no values)."""
  if kind == FLOATS:
    return b"\x0a" + _varint(4 * len(values)) + _struct.pack(f"<{len(values)}f", *values) \
        if values else b""
  packed = _packed_ints(values)
  return b"\x0a" + _varint(len(packed)) + packed if values else b""


class ExampleLayout:
  """The fixed part of an Example's encoding for a given set of feature keys."""

  def __init__(self, keys):
    self._keys = sorted(keys)  # deterministic serialization orders map entries by key
    # a map entry's key field, then the tag of its value (the Feature)
    self._key_value = {k: b"\x0a" + _varint(len(k.encode("utf-8"))) + k.encode("utf-8") +
                       b"\x12" for k in self._keys}
    # (key, kind, inner length) -> header: lengths repeat from image to image (one object,
    # two boxes...); building each header was a fifth of serialize (20 -> 16 us an example)
    self._headers = {}

  def serialize(self, features) -> bytes:
    """features: {key: (kind, values)}, keys a subset of the layout's; kinds BYTES/FLOATS/INTS.

    Lengths are computed ahead and the pieces joined once: the image bytes are copied one
    time, where nesting the messages by concatenation copied them five times (measured
    76 -> 41 us per 90 KB image with four objects)."""
    try:
      parts = [b"\x0a", b""]  # Example.features: tag, length (filled in below), entries
      body = 0
      for key in self._keys:
        entry = features.get(key)
        if entry is None:
          continue
        kind, values = entry
        if kind == BYTES:
          pieces = []
          for value in values:
            pieces += (b"\x0a" + _varint(len(value)), value)
          inner = sum(map(len, pieces))
          header = self._header(key, kind, inner)
          parts.append(header)
          parts += pieces
        else:
          if kind == FLOATS and not all(map(_math.isfinite, values)):
            raise OverflowError("non-finite float")
          if kind == INTS and any(v < -2**63 or v >= 2**63 for v in values):
            raise OverflowError("int64 out of range")
          payload = _small_payload(kind, values)
          inner = len(payload)
          header = self._header(key, kind, inner)
          parts += (header, payload)
        body += len(header) + inner
      parts[1] = _varint(body)
      return b"".join(parts)
    except (OverflowError, _struct.error):
      return serialize_slow(features)

  def _header(self, key: str, kind: str, inner: int) -> bytes:
    """A map entry up to its values: entry tag and length, key, Feature tag and length, the
    list's tag and length (`inner` bytes of values follow)."""
    cached = self._headers.get((key, kind, inner))
    if cached is None:
      if len(self._headers) > 100_000:  # bounded: byte lengths of images vary without end
        self._headers.clear()
      cached = self._headers[(key, kind, inner)] = self._build_header(key, kind, inner)
    return cached

  def _build_header(self, key: str, kind: str, inner: int) -> bytes:
    inner_len = _varint(inner)
    item = b"".join((self._key_value[key], _varint(1 + len(inner_len) + inner),  # Feature
                     _KIND_TAG[kind], inner_len))
    return b"\x0a" + _varint(len(item) + inner) + item


def serialize_slow(features) -> bytes:
  """The same bytes through protobuf (the reference the fast path is tested against)."""
  field = {BYTES: "bytes_list", FLOATS: "float_list", INTS: "int64_list"}
  example = Example(features=Features(feature={
      key: Feature(**{field[kind]: {"value": list(values)}})
      for key, (kind, values) in features.items()}))
  return example.SerializeToString(deterministic=True)
