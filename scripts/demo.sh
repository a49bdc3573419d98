#!/usr/bin/env bash
# Set up .venv, make a sample dataset of real JPEG/PNG images, convert it on the DirectRunner,
# print the summary and read the output back with TensorFlow. Extra arguments go to
# `beam-tfrecord demo` (e.g. --format voc, --output DIR, --direct_num_workers=2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec .venv/bin/beam-tfrecord demo "$@"
