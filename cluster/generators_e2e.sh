#!/usr/bin/env bash
# The generators' end-to-end run of docs/generators.md on the CMU view pairs (gen_data=cmu_views,
# built on first use from ../shared): FID extractor, VQ-VAE tokenizer, GPT, two-view GPT and the
# diffusion baseline, one job after the other, one torch thread each.
#   cluster/generators_e2e.sh [OUT=runs/gen_e2e] [STEPS_SCALE=1]   (~16 CPU-minutes at scale 1)
# STEPS_SCALE multiplies every job's steps (e.g. 0.001 for a smoke run).
set -euo pipefail
OUT=$(realpath -m "${1:-runs/gen_e2e}")
SCALE=${2:-1}
export WANDB_MODE=${WANDB_MODE:-offline}
steps() { python3 -c "import sys; print(max(1, round($1 * float(sys.argv[1]))))" "$SCALE"; }
mimic2dm-train-fid run_dir="$OUT/fid" train.max_steps="$(steps 600)"
mimic2dm-train-tokenizer run_dir="$OUT/tok" train.max_steps="$(steps 2000)" train.batch_size=64
mimic2dm-train-generator model=gpt tokenizer="$OUT/tok" fid="$OUT/fid" run_dir="$OUT/gpt" \
    train.max_steps="$(steps 1200)" train.batch_size=64
mimic2dm-train-generator model=gpt_multiview tokenizer="$OUT/tok" fid="$OUT/fid" run_dir="$OUT/gpt_multiview" \
    train.max_steps="$(steps 1200)" train.batch_size=32
mimic2dm-train-generator model=diffusion fid="$OUT/fid" run_dir="$OUT/diffusion" \
    train.max_steps="$(steps 1200)" train.batch_size=64
echo "generators in $OUT: fid tok gpt gpt_multiview diffusion (checkpoints/last.pt each)"
