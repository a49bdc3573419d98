"""Compact, deterministic Beam coders for the dataclasses that cross shuffles.

Without a registered coder, Beam pickles a dataclass: class references and a field-name dict
per object, and the in-process runner keeps every shuffled record in memory in that form.
`DataclassCoder` turns a record into a tuple of its field values (nested dataclasses, and
tuples of them, become tuples too) and encodes that with Beam's C-implemented primitives
coder, which is deterministic for str/int/float/bool/None/bytes/tuples. The layout comes from
`dataclasses.fields` and the field type hints when the coder is built, so a field added to
ImageAnnotation or ObjectAnnotation is carried without touching this module.
"""
from __future__ import annotations

import dataclasses
import operator
import typing
from typing import Any, Callable, List, Tuple, Type

from apache_beam import coders

_Convert = Callable[[Any], Any]


def _identity(value: Any) -> Any:
  return value


def _converters(hint: Any) -> Tuple[_Convert, _Convert]:
  """(to plain, from plain) for a value of type `hint`: dataclasses, Optional[...] of them and
  Tuple[dataclass, ...] are converted; everything else travels as it is."""
  if dataclasses.is_dataclass(hint):
    return _record_converters(hint)
  origin, args = typing.get_origin(hint), typing.get_args(hint)
  if origin is typing.Union and type(None) in args:
    inner = [a for a in args if a is not type(None)]
    if len(inner) == 1:
      to, back = _converters(inner[0])
      if to is _identity:
        return _identity, _identity
      return (lambda v: None if v is None else to(v)), (lambda v: None if v is None else back(v))
  if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
    to, back = _converters(args[0])
    if to is _identity:
      return (lambda v: tuple(v)), (lambda v: tuple(v))
    return (lambda v: tuple(map(to, v))), (lambda v: tuple(map(back, v)))
  return _identity, _identity


def _record_converters(cls: Type) -> Tuple[_Convert, _Convert]:
  """(record -> tuple, tuple -> record). Measured per ImageAnnotation with four objects:
  attrgetter and filling __dict__ directly (dataclass __init__ sets frozen fields one
  object.__setattr__ at a time) cut encode + decode from 36 to about 15 µs."""
  hints = typing.get_type_hints(cls)
  fields = dataclasses.fields(cls)
  names: List[str] = [f.name for f in fields if f.init]
  pairs = [_converters(hints[name]) for name in names]
  nested = [(i, to, back) for i, (to, back) in enumerate(pairs) if to is not _identity]
  get = operator.attrgetter(*names)
  if len(names) == 1:
    get = (lambda g: lambda record: (g(record),))(get)
  direct = (len(names) == len(fields) and not hasattr(cls, "__post_init__") and
            not hasattr(cls, "__slots__"))
  new = object.__new__

  def make(values) -> Any:
    if not direct:
      return cls(*values)
    record = new(cls)
    record.__dict__.update(zip(names, values))
    return record

  if not nested:
    return get, make

  def to_plain(record):
    values = list(get(record))
    for i, to, _ in nested:
      values[i] = to(values[i])
    return tuple(values)

  def from_plain(values):
    values = list(values)
    for i, _, back in nested:
      values[i] = back(values[i])
    return make(values)
  return to_plain, from_plain


class DataclassCoder(coders.Coder):
  """Encodes instances of one dataclass as the tuple of its (converted) field values."""

  def __init__(self, cls: Type):
    self.cls = cls
    self._to, self._from = _record_converters(cls)
    # not `_impl`: Coder.get_impl caches the coder's own impl under that name, and Beam would
    # then use the primitives coder directly, pickling every record through its fallback
    self._primitives = coders.FastPrimitivesCoder().get_impl()

  def encode(self, value: Any) -> bytes:
    return self._primitives.encode(self._to(value))

  def decode(self, encoded: bytes) -> Any:
    return self._from(self._primitives.decode(encoded))

  def estimate_size(self, value: Any) -> int:
    """Beam samples element sizes for its metrics; encoding for that doubled the coder's work
    (four encodes per image where two cross shuffles). A rough size is enough there."""
    return 256

  def is_deterministic(self) -> bool:
    return True

  def to_type_hint(self):
    return self.cls

  def __eq__(self, other):
    return type(self) is type(other) and self.cls is other.cls

  def __hash__(self):
    return hash((type(self), self.cls))

  def __reduce__(self):  # workers rebuild the converters from the class
    return DataclassCoder, (self.cls,)

  @classmethod
  def from_type_hint(cls, typehint, unused_registry):
    return cls(typehint)


def register(*classes: Type) -> None:
  """Make Beam use DataclassCoder for these classes wherever it knows the element type."""
  for cls in classes:
    coders.registry.register_coder(cls, DataclassCoder)
