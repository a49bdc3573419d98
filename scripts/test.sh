#!/usr/bin/env bash
# Set up .venv and run the whole test suite (real Beam pipelines on generated images).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec .venv/bin/python -m pytest -n auto "$@"
