#!/usr/bin/env bash
# A tracker trained on the generator's own 2D motion, through the paper's 2D-only path
# (docs/control.md, "A tracker trained on generated motion"): sample N clips per skill from a
# trained generator (`mimic2dm sample`, seeds 1000.. so that they never equal the seeds of
# `mimic2dm control --seed 0 --episodes 20`), estimate each clip's camera and 3D initial states
# (`mimic2dm preprocess`, as for a video), and train one tracker on them, plus any real clips given.
#   cluster/generated_tracker.sh GEN_RUN OUT [N=16] [SKILLS=walk] [SECONDS=3000] [-- TRAIN_OVERRIDES...]
# GEN_RUN: a `mimic2dm-train-generator` run (gen_data=cmu_views_control for control).
# REAL_CLIPS (env, space-separated absolute paths of clips with cameras): added to the training set.
# SAMPLE_CAMERA (env, default scale_px=135): `mimic2dm sample --camera`; 135 px is the CMU walk's body
# size (canonical scale) in the controller's follow camera (5 m, focal 1400 px), so the clips are
# placed as `control` places generated chunks (the generator data's static views are ~30-40 px).
# FRAMES (env, default 300): frames per sampled clip. ROOT_SMOOTH (env, default 0.5): preprocess's
# --root-smooth. The trained run is OUT/tracker; its data/ is not used: the clips are in OUT/pre.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 GEN_RUN OUT [N=16] [SKILLS=walk] [SECONDS=3000] [-- TRAIN_OVERRIDES...]" >&2
  exit 2
fi
[ -e "$1" ] || { echo "$0: GEN_RUN: no generator run or checkpoint at $1" >&2; exit 2; }
GEN=$(realpath "$1")
OUT=$(realpath -m "$2")
shift 2
# shellcheck source=cluster/lib_args.sh
. "$(dirname "$0")/lib_args.sh"
N=16
SKILLS=walk
SECS=3000
take_positionals N SKILLS SECS -- "$@"
set -- ${REST[@]+"${REST[@]}"}
require_int N "$N"
require_int SECONDS "$SECS"
FRAMES=${FRAMES:-300}
SAMPLE_CAMERA=${SAMPLE_CAMERA:-scale_px=135}
ROOT_SMOOTH=${ROOT_SMOOTH:-0.5}
export WANDB_MODE=${WANDB_MODE:-offline}
for c in ${REAL_CLIPS:-}; do
  [ -f "$c" ] || { echo "$0: REAL_CLIPS: no file $c" >&2; exit 2; }
done
mkdir -p "$OUT/clips" "$OUT/pre"
for s in ${SKILLS//,/ }; do
  for i in $(seq 0 $((N - 1))); do
    f="$OUT/clips/${s}_$i.npz"
    [ -f "$f" ] || mimic2dm sample "$GEN" --condition "$s" --frames "$FRAMES" --seed $((1000 + i)) \
        --camera "$SAMPLE_CAMERA" --out "$f"
  done
done
todo=()
for f in "$OUT"/clips/*.npz; do
  [ -f "$OUT/pre/$(basename "$f")" ] || todo+=("$f")
done
if [ ${#todo[@]} -gt 0 ]; then
  mimic2dm preprocess "${todo[@]}" --character humanoid --out "$OUT/pre" --root-smooth "$ROOT_SMOOTH" \
      --no-progress --json "$OUT/preprocess_$(date +%s).json" > /dev/null
fi
list=""
for f in ${REAL_CLIPS:-} "$OUT"/pre/*.npz; do
  case "$f" in *_motion3d.npz) continue ;; esac
  list="${list:+$list,}$f"
done
mimic2dm-train data=files "data.clips=[$list]" train.max_seconds="$SECS" train.max_epochs=100000000 \
    run_dir="$OUT/tracker" "$@"
echo "tracker on generated motion: $OUT/tracker (clips: $OUT/pre)"
