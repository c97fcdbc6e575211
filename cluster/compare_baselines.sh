#!/usr/bin/env bash
# Paper Table 1 on cmu_walk, cmu_run, cmu_hop (single static view, synthetic from ../shared):
# Mimic2DM (preprocessed, honest), Mimic2DM (ground-truth cameras, oracle), 3D-GT, Sfv*,
# each trained for the same wall-clock budget, then `mimic2dm compare` (docs/baselines.md).
#   cluster/compare_baselines.sh [BUDGET_S=3600] [OUT=runs/baselines] [OVERRIDE...]   (CLIPS="cmu_walk cmu_run cmu_hop")
# OVERRIDEs go to every mimic2dm-train run (e.g. train.num_envs=64).
# METHODS="mimic2dm sfv" trains only those rows (of mimic2dm mimic2dm_oracle gt3d sfv); the
# table then has the rows whose run dirs exist under OUT/CLIP.
# One run at a time: each gets the whole machine for BUDGET_S seconds of training.
set -euo pipefail
BUDGET=${1:-3600}
OUT=$(realpath -m "${2:-runs/baselines}")
EXTRA=("${@:3}")
ALL="mimic2dm mimic2dm_oracle gt3d sfv"
for method in ${METHODS:-$ALL}; do  # before any work
  case " $ALL " in *" $method "*) ;; *) echo "unknown method $method ($ALL)" >&2; exit 2 ;; esac
done
SHARED=${MIMIC2DM_SHARED:-$(dirname "$(realpath "$0")")/../../shared}
export WANDB_MODE=${WANDB_MODE:-offline}
for clip in ${CLIPS:-cmu_walk cmu_run cmu_hop}; do
  D=$OUT/$clip
  mkdir -p "$D/clips"
  mimic2dm data synth "$SHARED/data/mocap/$clip.npz" --character humanoid --views 1 --camera static \
      --seed 0 --fps 30 --ground --out "$D/clips/$clip.npz"  # as conf/data/$clip.yaml makes it
  mimic2dm data strip "$D/clips/$clip.npz" --out "$D/clips/${clip}_video.npz"
  mimic2dm preprocess "$D/clips/${clip}_video.npz" --character humanoid --out "$D/clips/pre" \
      --gt "$D/clips/$clip.npz" --json "$D/clips/pre/report.json"
  train() {  # run_dir, reference file, extra overrides
    local run=$1 ref=$2; shift 2
    mimic2dm-train data=files "data.clips=[{file: $ref}]" train.max_seconds="$BUDGET" train.max_epochs=100000000 \
        progress=false run_dir="$D/$run" "$@" ${EXTRA[@]+"${EXTRA[@]}"}
  }
  for method in ${METHODS:-$ALL}; do
    case $method in
      mimic2dm) train mimic2dm "$D/clips/pre/${clip}_video.npz" ;;
      mimic2dm_oracle) train mimic2dm_oracle "$D/clips/$clip.npz" ;;
      gt3d) train gt3d "$D/clips/$clip.npz" task=tracking3d ;;
      sfv) train sfv "$D/clips/pre/${clip}_video_motion3d.npz" task=tracking3d ;;
    esac
  done
  runs=()
  for method in $ALL; do
    if [ -d "$D/$method" ]; then runs+=("$D/$method"); fi
  done
  mimic2dm compare "${runs[@]}" --data "$D/clips/$clip.npz" --json "$D/table.json" --markdown "$D/table.md"
done
for clip in ${CLIPS:-cmu_walk cmu_run cmu_hop}; do echo "## $clip"; cat "$OUT/$clip/table.md"; done
