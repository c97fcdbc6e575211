#!/usr/bin/env bash
# A tracker fine-tuned on clips made in the control loop (docs/control.md, "Loop-made clips"):
# the tracker is driven by the generator for EPISODES 10 s episodes per skill (`mimic2dm control
# --clips-out`, seeds 1000.. so that they never equal the seeds of `control --seed 0 --episodes 20`),
# each episode is kept as a clip (the reference as the follow cameras saw it, the simulated states as
# initial states, cut before a fall or a lost reference), and the tracker is fine-tuned on them
# (`init_from`, learning rate 1e-4, `task.view_mode=clip`), plus any clips given in EXTRA_CLIPS.
#   cluster/loop_tracker.sh TRACKER_RUN GEN_RUN OUT [EPISODES=80] [SKILLS=walk] [SECONDS=3000] [-- TRAIN_OVERRIDES...]
# START_STATES (env, required, space-separated clips with 3D or preprocessed states): `control
# --start-states`, e.g. the tracker's own training clips. EXTRA_CLIPS (env, space-separated absolute
# paths): added to the training set (its real clips, or an earlier round's OUT/clips/*/loop_*.npz).
# CONTROL_ARGS (env): more `mimic2dm control` options. SEED (env, default 1000): the first
# episode's seed (a second round on new motion: another SEED). VIEW_MODE (env, default clip):
# `task.view_mode` of the fine-tune; `auto` shows the clips with 3D (real EXTRA_CLIPS) from fresh
# virtual cameras (give the camera settings as TRAIN_OVERRIDES) and the loop clips in their own
# views. The fine-tuned run is OUT/tracker.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 TRACKER_RUN GEN_RUN OUT [EPISODES=80] [SKILLS=walk] [SECONDS=3000] [-- TRAIN_OVERRIDES...]" >&2
  exit 2
fi
[ -e "$1" ] || { echo "$0: TRACKER_RUN: no tracker run or checkpoint at $1" >&2; exit 2; }
[ -e "$2" ] || { echo "$0: GEN_RUN: no generator run or checkpoint at $2" >&2; exit 2; }
TRACKER=$(realpath "$1")
GEN=$(realpath "$2")
OUT=$(realpath -m "$3")
shift 3
# shellcheck source=cluster/lib_args.sh
. "$(dirname "$0")/lib_args.sh"
EPISODES=80
SKILLS=walk
SECS=3000
take_positionals EPISODES SKILLS SECS -- "$@"
set -- ${REST[@]+"${REST[@]}"}
require_int EPISODES "$EPISODES"
require_int SECONDS "$SECS"
SEED=${SEED:-1000}
require_int SEED "$SEED" non-negative
VIEW_MODE=${VIEW_MODE:-clip}
case "$VIEW_MODE" in clip|auto) ;; *) echo "$0: VIEW_MODE: clip or auto, not '$VIEW_MODE' (loop clips have no 3D)" >&2; exit 2;; esac
[ -n "${START_STATES:-}" ] || { echo "$0: START_STATES (env) must name clips with 3D or preprocessed states" >&2; exit 2; }
start=()
for c in $START_STATES; do
  [ -f "$c" ] || { echo "$0: START_STATES: no file $c" >&2; exit 2; }
  start+=(--start-states "$c")
done
for c in ${EXTRA_CLIPS:-}; do
  [ -f "$c" ] || { echo "$0: EXTRA_CLIPS: no file $c" >&2; exit 2; }
done
export WANDB_MODE=${WANDB_MODE:-offline}
for s in ${SKILLS//,/ }; do
  d="$OUT/clips/$s"
  if [ ! -f "$OUT/control_$s.json" ]; then  # written when all its episodes are done
    # shellcheck disable=SC2086
    mimic2dm control --tracker "$TRACKER" --generator "$GEN" "${start[@]}" --skill "$s" --seconds 10 \
        --seed "$SEED" --episodes "$EPISODES" --no-fid --clips-out "$d" ${CONTROL_ARGS:-} \
        --json "$OUT/control_$s.json" > /dev/null
  fi
done
list=""
for f in ${EXTRA_CLIPS:-} "$OUT"/clips/*/loop_*.npz; do
  [ -f "$f" ] || continue
  list="${list:+$list,}$f"
done
[ -n "$list" ] || { echo "$0: no episode made a clip (see $OUT/clips/*/manifest.json)" >&2; exit 1; }
mimic2dm-train data=files "data.clips=[$list]" task.view_mode="$VIEW_MODE" init_from="$TRACKER" train.learning_rate=1e-4 \
    train.max_seconds="$SECS" train.max_epochs=100000000 run_dir="$OUT/tracker" "$@"
echo "tracker fine-tuned on loop-made clips: $OUT/tracker (clips: $OUT/clips)"
