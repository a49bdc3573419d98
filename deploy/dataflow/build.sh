#!/usr/bin/env bash
# Build the beam-tfrecord Dataflow images and Flex Template spec:
#   1. worker image   (Dockerfile.worker, FROM apache/beam_python3.11_sdk:2.78.0)
#   2. launcher image (Dockerfile, FROM gcr.io/dataflow-templates-base/python311-template-launcher-base)
#   3. the template spec file on GCS (gcloud dataflow flex-template build)
#
#   PROJECT=my-project REGION=us-central1 BUCKET=my-bucket bash deploy/dataflow/build.sh
#
# Images are built with a local Docker engine when one answers (`docker info`), else with Cloud
# Build (gcloud builds submit). The build context is a minimal copy of the repository (setup.py,
# beam_tfrecord/, pipelines/, deploy/dataflow/), never the virtualenvs.
# Environment: PROJECT, REGION, BUCKET (required); REPO (Artifact Registry repository, default
# beam-tfrecord; created if missing), TAG (default: the package version), TEMPLATE (default
# gs://BUCKET/templates/beam-tfrecord-TAG.json), BUILDER=docker|cloudbuild (default: auto),
# DRY_RUN=1 (print the commands, keep the context directory, run nothing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET (name, without gs://)}"
REPO="${REPO:-beam-tfrecord}"
TAG="${TAG:-$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$ROOT/beam_tfrecord/__init__.py")}"
IMAGES="$REGION-docker.pkg.dev/$PROJECT/$REPO"
WORKER_IMAGE="${WORKER_IMAGE:-$IMAGES/beam-tfrecord-worker:$TAG}"
LAUNCHER_IMAGE="${LAUNCHER_IMAGE:-$IMAGES/beam-tfrecord-launcher:$TAG}"
TEMPLATE="${TEMPLATE:-gs://$BUCKET/templates/beam-tfrecord-$TAG.json}"

run() {
  if [ -n "${DRY_RUN:-}" ]; then printf '+'; printf ' %q' "$@"; printf '\n'; else "$@"; fi
}

CONTEXT="$(mktemp -d)"
if [ -z "${DRY_RUN:-}" ]; then trap 'rm -rf "$CONTEXT"' EXIT; fi
mkdir -p "$CONTEXT/deploy/dataflow"
cp "$ROOT/setup.py" "$CONTEXT/"
cp -r "$ROOT/beam_tfrecord" "$ROOT/pipelines" "$CONTEXT/"
cp "$ROOT/deploy/dataflow/Dockerfile" "$ROOT/deploy/dataflow/Dockerfile.worker" \
   "$ROOT/deploy/dataflow/flex_main.py" "$CONTEXT/deploy/dataflow/"
find "$CONTEXT" -name __pycache__ -prune -exec rm -rf {} +
echo "build context: $CONTEXT"

BUILDER="${BUILDER:-}"
if [ -z "$BUILDER" ]; then
  if docker info >/dev/null 2>&1; then BUILDER=docker; else BUILDER=cloudbuild; fi
fi

if [ -z "${DRY_RUN:-}" ] && ! gcloud artifacts repositories describe "$REPO" \
    --project "$PROJECT" --location "$REGION" >/dev/null 2>&1; then
  gcloud artifacts repositories create "$REPO" --project "$PROJECT" --location "$REGION" \
    --repository-format docker --description "beam-tfrecord images"
fi

if [ "$BUILDER" = docker ]; then
  run gcloud auth configure-docker "$REGION-docker.pkg.dev" --quiet
  run docker build -f "$CONTEXT/deploy/dataflow/Dockerfile.worker" -t "$WORKER_IMAGE" "$CONTEXT"
  run docker build -f "$CONTEXT/deploy/dataflow/Dockerfile" -t "$LAUNCHER_IMAGE" "$CONTEXT"
  run docker push "$WORKER_IMAGE"
  run docker push "$LAUNCHER_IMAGE"
else
  cat > "$CONTEXT/cloudbuild.yaml" <<YAML
steps:
- name: gcr.io/cloud-builders/docker
  args: [build, -f, deploy/dataflow/Dockerfile.worker, -t, '$WORKER_IMAGE', .]
- name: gcr.io/cloud-builders/docker
  args: [build, -f, deploy/dataflow/Dockerfile, -t, '$LAUNCHER_IMAGE', .]
images: ['$WORKER_IMAGE', '$LAUNCHER_IMAGE']
timeout: 3600s
options:
  machineType: E2_HIGHCPU_8
YAML
  run gcloud builds submit "$CONTEXT" --project "$PROJECT" --region "$REGION" \
    --config "$CONTEXT/cloudbuild.yaml"
fi

run gcloud dataflow flex-template build "$TEMPLATE" \
  --project "$PROJECT" \
  --image "$LAUNCHER_IMAGE" \
  --sdk-language PYTHON \
  --metadata-file "$ROOT/deploy/dataflow/metadata.json"

cat <<MSG
template:        $TEMPLATE
launcher image:  $LAUNCHER_IMAGE
worker image:    $WORKER_IMAGE
run it with:     TEMPLATE=$TEMPLATE WORKER_IMAGE=$WORKER_IMAGE bash deploy/dataflow/run.sh ...
MSG
