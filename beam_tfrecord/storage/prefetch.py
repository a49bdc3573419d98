"""Ordered, bounded read-ahead: fetch the next items on threads while the caller works.

The shard writer reads a shard's images one after another. On an object store each read is a
round trip of tens of milliseconds, so it spends most of its time waiting; locally, file reads
(and the hashing done with them) release the GIL. `prefetch` keeps fetching ahead, but only
while the bytes in flight (fetched, not yet consumed) stay under a cap, and always yields in
input order, so the output does not depend on how the threads were scheduled.
"""
from __future__ import annotations

import collections
import concurrent.futures
import functools
from typing import Callable, Deque, Iterable, Iterator, Tuple, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def prefetch(items: Iterable[T], fetch: Callable[[T], R], size_of: Callable[[T], int],
             workers: int, max_bytes: int = DEFAULT_MAX_BYTES
             ) -> Iterator[Tuple[T, Callable[[], R]]]:
  """Yield (item, result) in input order; result() returns fetch(item) or raises its error.

  At most `workers` fetches run at once and at most 2 x workers are queued; a new one starts
  only while the sizes of the fetched-but-unconsumed items stay within max_bytes (one item is
  always allowed, however big). workers <= 1 fetches inline, when result() is called.
  """
  if workers <= 1:
    for item in items:
      yield item, functools.partial(fetch, item)
    return
  pending: Deque[Tuple[T, int, concurrent.futures.Future]] = collections.deque()
  in_flight = 0
  with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="prefetch") as pool:
    try:
      for item in items:
        size = max(0, size_of(item))
        while pending and (in_flight + size > max_bytes or len(pending) >= 2 * workers):
          done, done_size, future = pending.popleft()
          in_flight -= done_size
          yield done, future.result
        pending.append((item, size, pool.submit(fetch, item)))
        in_flight += size
      while pending:
        done, done_size, future = pending.popleft()
        in_flight -= done_size
        yield done, future.result
    finally:  # the consumer stopped early: do not start what is still queued
      for _, _, future in pending:
        future.cancel()
