#!/usr/bin/env bash
# RSMT end to end (docs/rsmt.md): phase model, motion manifold, style sampler and the style
# classifier on conf/rsmt_data/deepmimic_styles.yaml (../shared or $MIMIC2DM_SHARED), then the
# held-out evaluation against linear interpolation and the speed benchmark. One torch thread per job.
#   cluster/rsmt.sh [OUT=runs/rsmt] [STEPS_SCALE=1]   (about 45 CPU-minutes at scale 1 on the 2-core machine)
# STEPS_SCALE multiplies every job's steps (e.g. 0.01 for a smoke run). The corpus holds
# CC BY-NC clips (sie/): the models it trains stay out of the repository; this script rebuilds them.
set -euo pipefail
OUT=$(realpath -m "${1:-runs/rsmt}")
SCALE=${2:-1}
export WANDB_MODE=${WANDB_MODE:-offline}
steps() { python3 -c "import sys; print(max(1, round($1 * float(sys.argv[1]))))" "$SCALE"; }
mimic2dm-train-rsmt part=phase run_dir="$OUT/phase" train.max_steps="$(steps 1500)"
mimic2dm-train-rsmt part=classifier run_dir="$OUT/classifier" train.max_steps="$(steps 3000)"
mimic2dm-train-rsmt part=manifold phase="$OUT/phase" run_dir="$OUT/manifold" train.max_steps="$(steps 3000)"
mimic2dm-train-rsmt part=sampler manifold="$OUT/manifold" run_dir="$OUT/sampler" train.max_steps="$(steps 2000)"
mimic2dm bench rsmt --model "$OUT/sampler" --classifier "$OUT/classifier" --json "$OUT/eval.json"
mimic2dm bench generate --model-type rsmt --checkpoint "$OUT/sampler" --json "$OUT/speed.json"
echo "RSMT in $OUT: phase classifier manifold sampler (checkpoints/last.pt each), eval.json, speed.json"
