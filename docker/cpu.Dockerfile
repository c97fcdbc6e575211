# CPU image of Mimic2DM: the project with its default set-up (MuJoCo engine, rl-games PPO, Ray,
# Hydra, wandb offline) and OSMesa for rollout videos on machines without a GPU.
# Build from the repository root:  make docker-cpu   (docker build -f docker/cpu.Dockerfile .)
# Run:  docker run --rm -v "$PWD/runs:/opt/mimic2dm/runs" mimic2dm:cpu          # the demo
#       docker run --rm mimic2dm:cpu mimic2dm-train train.max_epochs=10
FROM python:3.11-slim-bookworm

# make: the image's commands are the Makefile's; libosmesa6: MuJoCo's software renderer
# (MUJOCO_GL=osmesa); ffmpeg: mp4 encoding of rollout videos.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make libosmesa6 libgl1 ffmpeg \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 WANDB_MODE=offline MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa \
    MIMIC2DM_SHARED=/data/shared
WORKDIR /opt/mimic2dm
COPY pyproject.toml README.md Makefile ./
COPY mimic2dm ./mimic2dm
COPY tasks ./tasks
COPY generators ./generators
COPY conf ./conf

# The Makefile's `setup` steps (tests/test_docker.py checks they match): torch first, from
# PyTorch's CPU wheel index here (PyPI's default Linux wheel is the multi-GB CUDA build).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN python -m venv /opt/venv \
    && /opt/venv/bin/python -m pip install -q torch==2.13.0 --index-url "${TORCH_INDEX}" \
    && /opt/venv/bin/python -m pip install -q -e ".[dev]"

CMD ["mimic2dm", "demo", "--out", "runs/demo"]
