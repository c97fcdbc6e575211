#!/usr/bin/env bash
# The generalist tracker (docs/distill.md): 3D expert trackers over groups of the motion corpus
# (one Hydra sweep: basic launcher here, `LAUNCHER=submitit_slurm` or `ray_cluster` on a
# cluster, where the experts train in parallel), DAgger distillation of the experts into one
# view-agnostic 2D student, its evaluation over every corpus window x 8 held-out cameras, and
# PPO fine-tuning from the student against training from scratch on one clip and on two real
# clips outside the corpus (through `mimic2dm imitate`), and the student zero-shot on them.
#   cluster/generalist.sh [OUT=runs/generalist] [EXPERT_SECONDS=1800] [DISTILL_SECONDS=3600] [FINETUNE_MINUTES=10]
# On the 2-core machine the experts run one after another: 8 x EXPERT_SECONDS, then the
# distillation, the evaluation (776 window x camera rollouts) and 2 x FINETUNE_MINUTES.
# The corpus holds CC BY-NC clips (sie/): the models stay out of the repository; this script
# rebuilds them. Smoke run: cluster/generalist.sh /tmp/g 20 20 0.2
set -euo pipefail
OUT=$(realpath -m "${1:-runs/generalist}")
EXPERT_SECONDS=${2:-1800}
DISTILL_SECONDS=${3:-3600}
FINETUNE_MINUTES=${4:-10}
LAUNCHER=${LAUNCHER:-basic}
export WANDB_MODE=${WANDB_MODE:-offline}

# Expert groups: every corpus window in exactly one (tests/test_distill.py checks it).
# BEGIN GROUPS
GROUPS_LIST=(
  "[humanoid3d_walk,humanoid3d_long_walk*,cmu_walk]"
  "[humanoid3d_stealthy_walk*,humanoid3d_zombie_walk,humanoid3d_long_zombie*]"
  "[humanoid3d_run,humanoid3d_jog,cmu_run,sie_humanoid3d_run_forward*]"
  "[sie_humanoid3d_run_left*]"
  "[sie_humanoid3d_run_right*]"
  "[humanoid3d_punch,humanoid3d_kick,sie_humanoid3d_punch_forward*]"
  "[humanoid3d_jump,cmu_hop]"
  "[humanoid3d_crawl,humanoid3d_roll,humanoid3d_sideflip,humanoid3d_spin,humanoid3d_spinkick,humanoid3d_dance_spin]"
)
# END GROUPS
SELECT=$(IFS=,; echo "${GROUPS_LIST[*]}")

# 1. experts: 3D trackers (they see the clips' 3D keypoints), one per group
mimic2dm-train -m task=tracking3d data=corpus "data.select=$SELECT" "hydra/launcher=$LAUNCHER" \
  train.max_seconds="$EXPERT_SECONDS" train.max_epochs=100000000 progress=false \
  hydra.sweep.dir="$OUT/experts"
EXPERTS=$(ls -d "$OUT"/experts/[0-9]* | paste -sd, -)

# 2. the student: a 2D tracker under a random virtual camera per episode, labelled by the experts
mimic2dm-distill data=corpus "experts=[$EXPERTS]" distill.max_seconds="$DISTILL_SECONDS" \
  distill.max_iterations=100000000 run_dir="$OUT/student"

# 3. every corpus window x its 8 evaluation cameras (never drawn in training), last checkpoint
mimic2dm bench corpus "$OUT/student" --out "$OUT/bench_corpus" --json "$OUT/bench_corpus.json"

# 4. fine-tuning from the student against training from scratch (time to first success)
mimic2dm bench learn --clips cmu_hop --minutes "$FINETUNE_MINUTES" --init-from "$OUT/student" \
  --out-dir "$OUT/finetune" --json "$OUT/finetune.json"

# 5. real clips outside the corpus (Penn Action squat 1807 and tennis serve 2218, in ../shared):
#    imitate's chain from scratch and from the student, and the student zero-shot on its preprocessing
SHARED=${MIMIC2DM_SHARED:-$(dirname "$0")/../../shared}
for id in 1807 2218; do
  mimic2dm data import-penn "$SHARED/data/video2d/penn_action/$id.mat" --out "$OUT/real/penn_$id.npz"
  mimic2dm imitate "$OUT/real/penn_$id.npz" --out "$OUT/real/scratch_$id" --minutes "$FINETUNE_MINUTES"
  mimic2dm imitate "$OUT/real/penn_$id.npz" --out "$OUT/real/student_$id" --minutes "$FINETUNE_MINUTES" \
    --override "init_from=$OUT/student" --override train.learning_rate=1e-4
  mimic2dm eval "$OUT/student" --data "$OUT/real/scratch_$id/preprocess/penn_$id.npz" --json "$OUT/real/zero_shot_$id.json"
done
echo "generalist in $OUT: experts/0-$((${#GROUPS_LIST[@]} - 1)), student, bench_corpus.json, finetune.json, real/"
