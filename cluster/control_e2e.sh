#!/usr/bin/env bash
# The hierarchical-control experiments end to end from a trained tracker run (docs/control.md, docs/results/):
# generators (FID extractor, tokenizer, GPT, diffusion), Table 3 (GPT vs diffusion in the loop on
# the same tracker and seeds), the two-view experiment (tracker rollouts -> two-view GPT -> the
# tracker aggregating both generated views), videos, and the markdown table. Generators train on
# gen_data=cmu_views_control (static views: generated root motion is ground motion under the
# controller's still cameras) and the rollouts use static cameras for the same reason; every
# controlled episode starts from the state of the tracker's training clips that matches the first
# generated frames (--start-states, docs/control.md).
#   cluster/control_e2e.sh TRACKER_RUN [OUT=runs/control_e2e] [EPISODES=20] [STEPS_SCALE=1]
# TRACKER_RUN: a run of `mimic2dm-train data=cmu_all_10s task.view_mode=virtual ...` (docs/control.md; its data/ holds
# the single-view clips the rollouts follow). STEPS_SCALE multiplies the generators' steps;
# CONTROL_SECONDS (default 10) is the length of each controlled episode.
set -euo pipefail
T=$(realpath "$1")
OUT=$(realpath -m "${2:-runs/control_e2e}")
EPS=${3:-20}
SCALE=${4:-1}
SECS=${CONTROL_SECONDS:-10}
export WANDB_MODE=${WANDB_MODE:-offline}
steps() { python3 -c "import sys; print(max(1, round($1 * float(sys.argv[1]))))" "$SCALE"; }
G=$OUT/generators
GD=gen_data=cmu_views_control
REAL=$PWD/runs/gen_data/cmu_views_control_el10/heldout  # built (relative to the working directory) by the jobs below
mkdir -p "$G" "$OUT/table3"
CLIPS=()
START=()
for c in "$T"/data/*.npz; do CLIPS+=(--data "$c"); START+=(--start-states "$c"); done
mimic2dm-train-fid $GD run_dir="$G/fid" train.max_steps="$(steps 600)"
mimic2dm-train-tokenizer $GD run_dir="$G/tok" train.max_steps="$(steps 2000)" train.batch_size=64 &
mimic2dm-train-generator $GD model=diffusion fid="$G/fid" run_dir="$G/diffusion" \
    train.max_steps="$(steps 1200)" train.batch_size=64 &
wait
mimic2dm-train-generator $GD model=gpt tokenizer="$G/tok" fid="$G/fid" run_dir="$G/gpt" \
    train.max_steps="$(steps 1200)" train.batch_size=64 &
# appendix B.5: the tracker's own 3D motion, projected into orthogonal view pairs
mimic2dm rollouts "$T" "${CLIPS[@]}" --views 2 --sets 64 --seed 0 --camera-modes static --out "$G/rollouts/train" \
    --json "$G/rollouts_train.json"
mimic2dm rollouts "$T" "${CLIPS[@]}" --views 2 --sets 16 --seed 1000 --camera-modes static --out "$G/rollouts/heldout" \
    --json "$G/rollouts_heldout.json"
wait
mimic2dm-train-generator model=gpt_multiview tokenizer="$G/tok" fid="$G/fid" run_dir="$G/gpt_multiview_rollouts" \
    gen_data=dir gen_data.dir="$G/rollouts/train" gen_data.heldout_dir="$G/rollouts/heldout" \
    train.max_steps="$(steps 1200)" train.batch_size=32
for s in walk run hop; do
  for gen in gpt diffusion gpt_multiview_rollouts; do
    mimic2dm control --tracker "$T" --generator "$G/$gen" --fid "$G/fid" --real "$REAL" "${START[@]}" --skill "$s" \
        --seconds "$SECS" --seed 0 --episodes "$EPS" --json "$OUT/table3/${gen}_${s}.json"
  done
done
mimic2dm control --tracker "$T" --generator "$G/gpt" --fid "$G/fid" --real "$REAL" "${START[@]}" --skill walk --switch "$SECS:run" --seconds "$((2 * SECS))" \
    --seed 0 --video "$OUT/gpt_walk_to_run.mp4" --json "$OUT/gpt_walk_to_run.json" || echo "video: no GL back-end?"
mimic2dm control --tracker "$T" --generator "$G/gpt_multiview_rollouts" --fid "$G/fid" --real "$REAL" "${START[@]}" --skill walk --seconds "$SECS" \
    --seed 0 --video "$OUT/two_view_walk.mp4" --json "$OUT/two_view_walk.json" || echo "video: no GL back-end?"
mimic2dm control-table "$OUT"/table3/*.json --markdown "$OUT/table3.md"
echo "control experiments in $OUT: table3.md, table3/*.json, videos"
