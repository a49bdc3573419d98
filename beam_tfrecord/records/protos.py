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
_FIELD = [b"\x0a" + bytes((i,)) for i in range(0x80)]  # tag and length of a short field 1
# Struct objects for float lists of up to 64 values: formatting "<{n}f" for each call cost
# more than the packing (0.57 -> 0.24 us for two floats; loaded 2-core machine)
_FLOATS_PACK = [_struct.Struct(f"<{n}f").pack for n in range(64)]


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


class ExampleLayout:
  """The fixed part of an Example's encoding for a given set of feature keys."""

  def __init__(self, keys):
    self._keys = sorted(keys)  # deterministic serialization orders map entries by key
    # a map entry's key field, then the tag of its value (the Feature)
    self._key_value = {k: b"\x0a" + _varint(len(k.encode("utf-8"))) + k.encode("utf-8") +
                       b"\x12" for k in self._keys}
    # (key, kind, length) -> an entry's header: lengths repeat from image to image (one
    # object, two boxes...); building each header was a fifth of serialize (20 -> 16 us an
    # example). _heads: the header and the tag and length of the one field that follows.
    self._headers = {}
    self._heads = {}

  def serialize(self, features) -> bytes:
    """features: {key: (kind, values)}, keys a subset of the layout's; kinds BYTES/FLOATS/INTS.

    The pieces are joined once: the image bytes are copied one time, where nesting the
    messages by concatenation copied them five times (measured 76 -> 41 us per 90 KB image
    with four objects). Anything protobuf may encode otherwise (non-finite floats, floats
    beyond float32, ints beyond int64) goes through protobuf. With the fast paths below, an
    od-api Example of two boxes took 13.8 us, 22.8 before (timeit, loaded 2-core machine)."""
    heads, headers = self._heads, self._headers
    try:
      parts = [b""]  # Example.features: its tag and length, filled in below; then the entries
      for key in self._keys:
        entry = features.get(key)
        if entry is None:
          continue
        kind, values = entry
        n = len(values)
        if kind == BYTES and n == 1:
          data = values[0]
        elif kind == BYTES or not n:  # several byte strings, each a field of its own, or none
          pieces = []
          for value in values:
            size = len(value)
            pieces += (_FIELD[size] if size < 0x80 else b"\x0a" + _varint(size), value)
          inner = sum(map(len, pieces))
          parts.append(headers.get((key, kind, inner)) or self._header(key, kind, inner))
          parts += pieces
          continue
        elif kind == FLOATS:
          # finite floats that struct packs (beyond float32 it raises) have a finite sum:
          # one sum, not a check of each value
          if not _math.isfinite(sum(values)):
            raise OverflowError("non-finite float")
          data = _FLOATS_PACK[n](*values) if n < 64 else _struct.pack(f"<{n}f", *values)
        elif n == 1 and 0 <= values[0] < 0x80:  # a flag, an id, a size: one byte
          data = _ONE_BYTE[values[0]]
        else:
          low, high = min(values), max(values)
          if low < -2**63 or high >= 2**63:
            raise OverflowError("int64 out of range")
          data = bytes(values) if low >= 0 and high < 0x80 else _packed_ints(values)
        size = len(data)
        parts += (heads.get((key, kind, size)) or self._head(key, kind, size), data)
      parts[0] = b"\x0a" + _varint(sum(map(len, parts)))
      return b"".join(parts)
    except (OverflowError, _struct.error):
      return serialize_slow(features)

  def _head(self, key: str, kind: str, size: int) -> bytes:
    """A map entry up to the `size` bytes of its one field: the header, then the field's tag
    (a packed list's, or one bytes value's) and length."""
    field = b"\x0a" + _varint(size)
    return _remember(self._heads, (key, kind, size),
                   self._header(key, kind, len(field) + size) + field)

  def _header(self, key: str, kind: str, inner: int) -> bytes:
    """A map entry up to its values: entry tag and length, key, Feature tag and length, the
    list's tag and length (`inner` bytes of values follow)."""
    return _remember(self._headers, (key, kind, inner), self._build_header(key, kind, inner))

  def _build_header(self, key: str, kind: str, inner: int) -> bytes:
    inner_len = _varint(inner)
    item = b"".join((self._key_value[key], _varint(1 + len(inner_len) + inner),  # Feature
                     _KIND_TAG[kind], inner_len))
    return b"\x0a" + _varint(len(item) + inner) + item


def _remember(cache, key, value: bytes) -> bytes:
  """`value`, stored in `cache` under `key`."""
  if len(cache) > 100_000:  # bounded: byte lengths of images vary without end
    cache.clear()
  cache[key] = value
  return value


def serialize_slow(features) -> bytes:
  """The same bytes through protobuf (the reference the fast path is tested against)."""
  field = {BYTES: "bytes_list", FLOATS: "float_list", INTS: "int64_list"}
  example = Example(features=Features(feature={
      key: Feature(**{field[kind]: {"value": list(values)}})
      for key, (kind, values) in features.items()}))
  return example.SerializeToString(deterministic=True)
