"""Shared test set-up.

``import mimic2dm`` first: it picks MuJoCo's offscreen GL backend (OSMesa on headless
machines), which MuJoCo reads once, when any test module first imports it.
"""

import os

import mimic2dm  # noqa: F401

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
