# GPU image of Mimic2DM: CUDA runtime, Python 3.11, the project with the Newton engine extra
# (engine=newton engine.device=cuda:0). Needs the NVIDIA container toolkit on the host.
# Build from the repository root:  make docker-gpu   (docker build -f docker/gpu.Dockerfile .)
# Run:  docker run --rm --gpus all mimic2dm:gpu mimic2dm-train engine=newton engine.device=cuda:0
FROM nvidia/cuda:12.8.1-runtime-ubuntu22.04

# Ubuntu 22.04's own Python is 3.10: the project needs 3.11 (packaged in jammy as python3.11).
# libegl1 + libgl1: MuJoCo's EGL renderer on the GPU (MUJOCO_GL=egl) for rollout videos.
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv make libegl1 libgl1 ffmpeg \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 WANDB_MODE=offline MUJOCO_GL=egl \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics MIMIC2DM_SHARED=/data/shared
WORKDIR /opt/mimic2dm
COPY pyproject.toml README.md Makefile ./
COPY mimic2dm ./mimic2dm
COPY tasks ./tasks
COPY generators ./generators
COPY conf ./conf

# The Makefile's `setup` steps (tests/test_docker.py checks they match): torch first, here
# PyPI's default Linux wheel, which is the CUDA build; then the project with the Newton extra.
RUN python3.11 -m venv /opt/venv \
    && /opt/venv/bin/python -m pip install -q torch==2.13.0 \
    && /opt/venv/bin/python -m pip install -q -e ".[dev,newton]"

CMD ["mimic2dm-train", "engine=newton", "engine.device=cuda:0"]
