"""The Cloud Storage client: one per process, made as Beam's GcsIO makes it (so credentials,
the emulator and retries behave as Beam's own gs:// reads), with a connection pool as large as
the read-ahead. Used for one-request image reads, the lock's conditional create, and
one-level listings."""
from __future__ import annotations

import functools

# HTTP connections kept per host by the Cloud Storage client: as many as read-ahead threads
# (shard_writer.REMOTE_READ_AHEAD) may ask at once. The default, 10, made urllib3 drop and
# reopen connections under 16 threads ("Connection pool is full").
GCS_CONNECTIONS = 32


@functools.lru_cache(maxsize=1)
def client():
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
