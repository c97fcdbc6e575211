"""Shared test set-up.

``import mimic2dm`` first: it picks MuJoCo's offscreen GL backend (OSMesa on headless
machines), which MuJoCo reads once, when any test module first imports it.
"""

import os

import pytest
import torch

import mimic2dm  # noqa: F401

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tests with one torch thread (restored afterwards)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)
