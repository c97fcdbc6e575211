"""Model weights from the Hugging Face hub without waiting on a network that is not there.

transformers retries an unreachable hub for ~30 s before it looks in its cache (and then
fails when the model is not there). ``mimic2dm extract`` asks once, up front, whether the
hub answers (:func:`hub_offline`: ``HF_HUB_OFFLINE`` or one HEAD request of at most a few
seconds); when it does not, models load from the cache only (:func:`hub_kwargs`), and a
model that is not cached fails at once with what to do instead
(:func:`check_available`), before any model is loaded.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

PROBE_TIMEOUT_S = 3.0
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
INSTEAD = ("pass a local folder written by save_pretrained / `mimic2dm pose convert-mmpose CKPT --out DIR`, "
           "or use --random-weights for an offline smoke run")  # fmt: skip


@functools.cache
def _hub_answers(endpoint: str) -> bool:
    import httpx

    try:
        httpx.head(endpoint, timeout=PROBE_TIMEOUT_S)  # any HTTP answer means it is reachable
    except httpx.HTTPError:
        return False
    return True


def hub_offline() -> str | None:
    """Why the hub cannot be used now (``HF_HUB_OFFLINE`` is set / the endpoint does not
    answer), or None when it can. The probe runs once per process."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    if not _hub_answers(constants.ENDPOINT):
        return f"{constants.ENDPOINT} cannot be reached"
    return None


def _is_local(ref: str) -> bool:
    return Path(ref).expanduser().is_dir()


def hub_kwargs(ref: str) -> dict:
    """``from_pretrained`` keyword arguments for ``ref``: cache only while the hub is offline."""
    return {} if _is_local(ref) or hub_offline() is None else {"local_files_only": True}


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", ".", "~")) or ref.count("/") > 1 or os.sep != "/" and os.sep in ref


def check_available(what: str, name_or_path: str, registry, random_weights: bool) -> None:
    """Fail before any loading when ``name_or_path`` cannot be read.

    Args:
        what: ``"detector"`` / ``"pose model"`` (for the message).
        name_or_path: registry name, local folder or hub model id.
        registry: the registry of ``what`` (entries carry ``hub_id``).
        random_weights: registered architectures then need nothing; a folder / id still
            provides its ``config.json``.

    Raises:
        ModelLoadError: a path that is not a folder, or a hub id missing from the local
            cache while the hub is offline; the message says what to do instead.
    """
    from mimic2dm.video.pose import ModelLoadError

    ref = name_or_path
    if name_or_path in registry:
        ref = registry.load(name_or_path).hub_id
        if random_weights or ref is None:  # built from the registry / the loader explains
            return
    if _is_local(ref):
        return
    if _looks_like_path(ref):
        raise ModelLoadError(f"{what} {ref!r}: no such folder; {INSTEAD}")
    reason = hub_offline()
    if reason is None:
        return
    from huggingface_hub import constants, try_to_load_from_cache

    def cached(name: str) -> bool:
        try:
            return isinstance(try_to_load_from_cache(ref, name), str)
        except ValueError:  # not a valid model id
            return False

    if cached("config.json") and (random_weights or any(map(cached, WEIGHT_FILES))):
        return
    raise ModelLoadError(
        f"{what} {ref!r} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {reason}; "
        f"download it once where the hub can be reached, {INSTEAD}"
    )
