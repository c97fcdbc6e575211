#!/bin/bash
# Start a Ray head on this machine and train with envs in its actors (what a cluster job does,
# on one machine): bash cluster/ray_local.sh [mimic2dm-train overrides...]
set -euo pipefail
PORT=${RAY_PORT:-6390}
# Ray 2.60 clusters started with `ray start` use token authentication: the driver must use it too
# (the token is in ~/.ray/auth_token, written by `ray start`).
export RAY_AUTH_MODE=token
# `ray start` gives its raylet a fixed 30 s to register with GCS, which a busy 2-core machine can
# miss ("The current node timed out during startup"): try up to 3 times.
for attempt in 1 2 3; do
  ray start --head --node-ip-address=127.0.0.1 --port="$PORT" --num-cpus="${RAY_CPUS:-$(nproc)}" \
      --include-dashboard=false && break
  [ "$attempt" -lt 3 ] || exit 1
  echo "ray start failed (attempt $attempt of 3); starting again" >&2
  ray stop --force >/dev/null 2>&1 || true
  sleep 2
done
trap 'ray stop --force >/dev/null' EXIT
mimic2dm-train ray=local ray.address="127.0.0.1:$PORT" "$@"
