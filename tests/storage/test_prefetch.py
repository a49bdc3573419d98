"""storage/prefetch.py: ordered, bounded read-ahead."""
from __future__ import annotations

import threading
import time

from beam_tfrecord.storage.prefetch import prefetch


def test_prefetch_keeps_order_bounds_bytes_and_reports_errors():
  lock = threading.Lock()
  state = {"now": 0, "peak": 0}
  sizes = {i: (50 if i % 3 else 200) for i in range(40)}

  def fetch(i):
    with lock:
      state["now"] += sizes[i]
      state["peak"] = max(state["peak"], state["now"])
    time.sleep(0.001 * (i % 4))  # finish out of order
    if i == 7:
      raise ValueError("boom")
    return i * 10

  out = []
  for i, result in prefetch(range(40), fetch, sizes.get, workers=4, max_bytes=300):
    try:
      out.append(result())
    except ValueError:
      out.append("error")
    with lock:
      state["now"] -= sizes[i]
  assert out == [i * 10 if i != 7 else "error" for i in range(40)]
  # fetched and not yet consumed: the cap, plus the one item that is always allowed
  assert state["peak"] <= 300 + 200
  assert [r() for _, r in prefetch([1, 2], lambda i: -i, lambda i: 1, workers=1)] == [-1, -2]
