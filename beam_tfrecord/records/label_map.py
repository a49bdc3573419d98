"""Read and write label_map.pbtxt (the TF Object Detection API's StringIntLabelMap)."""
from __future__ import annotations

from typing import Dict, Iterable, Mapping

from google.protobuf import text_format

from beam_tfrecord.records import protos


def from_names(names: Iterable[str], first_id: int = 1) -> Dict[str, int]:
  """Default for formats without ids (VOC, CSV): sorted class names get ids 1..N (from
  `first_id`: 0 for classification, as Keras and TFDS number classes)."""
  return {name: i for i, name in enumerate(sorted(set(names)), start=first_id)}


def parse(text: str, min_id: int = 1) -> Dict[str, int]:
  """Parse pbtxt text into {name: id}; ids must be >= min_id (1: 0 is background in the TF
  OD API) and names unique."""
  message = protos.StringIntLabelMap()
  try:
    text_format.Parse(text, message)
  except text_format.ParseError as e:
    raise ValueError(f"label map is not valid pbtxt: {e}") from None
  result: Dict[str, int] = {}
  for item in message.item:
    if not item.name:
      raise ValueError(f"label map item with id {item.id} has no name")
    if item.id < min_id:
      raise ValueError(f"label map id for {item.name!r} must be >= {min_id}"
                       + (" (0 is background)" if min_id == 1 else ""))
    if item.name in result and result[item.name] != item.id:
      raise ValueError(f"label map gives {item.name!r} two ids: {result[item.name]} and {item.id}")
    result[item.name] = item.id
  if not result:
    raise ValueError("label map has no items")
  return result


def to_text(label_map: Mapping[str, int]) -> str:
  """Format {name: id} as pbtxt, ordered by id (the order the TF OD API files use)."""
  message = protos.StringIntLabelMap()
  for name, label_id in sorted(label_map.items(), key=lambda kv: (kv[1], kv[0])):
    message.item.add(name=name, id=label_id)
  return text_format.MessageToString(message, as_utf8=True)


def to_lines(label_map: Mapping[str, int]) -> str:
  """labels.txt: line i is the name of id i (an empty line for an unused id)."""
  by_id: Dict[int, str] = {}
  for name, label_id in sorted(label_map.items()):
    by_id.setdefault(label_id, name)
  size = max(label_map.values(), default=-1) + 1
  return "".join(f"{by_id.get(i, '')}\n" for i in range(size))
