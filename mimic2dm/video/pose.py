"""Top-down ViTPose pose estimation on boxes (transformers' ``VitPoseForPoseEstimation``).

Registered architectures (:data:`POSE_MODELS`), all 256x192 input, 16x16 patches:

| name | backbone (width, layers, heads) | decoder | keypoints | transformers weights |
|---|---|---|---|---|
| ``vitpose-s`` / ``-b`` / ``-l`` / ``-h`` | 384/12/12, 768/12/12, 1024/24/16, 1280/32/16 | classic (2 deconvs) | COCO-17 | B: ``usyd-community/vitpose-base`` |
| ``vitpose-{s,b,l,h}-simple`` | same | simple (bilinear x4 + 3x3 conv) | COCO-17 | B: ``usyd-community/vitpose-base-simple`` |
| ``vitpose-plus-{s,b,l,h}-ap10k`` | same | classic | AP-10K (-> dog17) | none: convert the ViTPose++ checkpoint |

A model's output channels are matched to the project's keypoint set by the names in its
``config.id2label`` (written by ``mimic2dm pose convert-mmpose``); a model with generic
labels (``LABEL_0``...) and 17 outputs is taken as COCO-17, which is what the
``usyd-community`` models are.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mimic2dm.motion.keypoint_sets import COCO17, DOG17
from mimic2dm.utils.registry import Registry
from mimic2dm.video.decode import decode_heatmaps
from mimic2dm.video.transforms import (
    BOX_PADDING,
    IMAGENET_MEAN,
    IMAGENET_STD,
    box_to_center_scale,
    crop_affine,
    crop_images,
    heatmap_to_image,
    normalize,
)

AP10K_NAMES = (
    "L_Eye", "R_Eye", "Nose", "Neck", "Root of tail",
    "L_Shoulder", "L_Elbow", "L_F_Paw", "R_Shoulder", "R_Elbow", "R_F_Paw",
    "L_Hip", "L_Knee", "L_B_Paw", "R_Hip", "R_Knee", "R_B_Paw",
)  # fmt: skip
"""AP-10K keypoint order and names as mmpose's ``ap10k`` dataset metainfo spells them."""

AP10K_TO_DOG17 = dict(zip(AP10K_NAMES, DOG17.names, strict=True))
"""AP-10K name -> dog17 name (dog17 follows AP-10K's order, so the map is one to one)."""

LAYOUTS: dict[str, tuple[str, ...]] = {"coco17": COCO17.names, "ap10k": AP10K_NAMES}
"""Head output layouts the pipeline understands, by the names stored in ``id2label``."""

_TARGET_NAMES = {"coco17": {n: n for n in COCO17.names}, "ap10k": AP10K_TO_DOG17}
_LAYOUT_FOR_SET = {"coco17": "coco17", "dog17": "ap10k"}


class ModelLoadError(RuntimeError):
    """A pose model or detector could not be built or loaded (the message says how to fix it)."""


@dataclass(frozen=True)
class PoseModelSpec:
    """A registered ViTPose architecture (see the module table)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    simple_decoder: bool
    layout: str
    hub_id: str | None
    image_size: tuple[int, int] = (256, 192)
    patch_size: tuple[int, int] = (16, 16)


_SIZES = {"s": (384, 12, 12), "b": (768, 12, 12), "l": (1024, 24, 16), "h": (1280, 32, 16)}
VITPOSE_HEADS = {384: 12, 768: 12, 1024: 16, 1280: 16}
"""Attention heads of the official ViTPose sizes, by width (shapes alone do not tell them)."""

POSE_MODELS: Registry[PoseModelSpec] = Registry("pose model")


def _register_pose_models() -> None:
    hubs = {
        ("b", False): "usyd-community/vitpose-base",
        ("b", True): "usyd-community/vitpose-base-simple",
    }
    for size, (hid, layers, heads) in _SIZES.items():
        for simple in (False, True):
            name = f"vitpose-{size}" + ("-simple" if simple else "")
            spec = PoseModelSpec(
                name, hid, layers, heads, simple, "coco17", hubs.get((size, simple))
            )
            POSE_MODELS.register(name, lambda s=spec: s)
        name = f"vitpose-plus-{size}-ap10k"
        spec = PoseModelSpec(name, hid, layers, heads, False, "ap10k", None)
        POSE_MODELS.register(name, lambda s=spec: s)


_register_pose_models()


def pose_config(
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    *,
    simple_decoder: bool = False,
    layout: str = "coco17",
    num_keypoints: int | None = None,
    image_size: tuple[int, int] = (256, 192),
    patch_size: tuple[int, int] = (16, 16),
):
    """A ``VitPoseConfig`` as in the official ViTPose (layer-norm eps 1e-6, qkv bias).

    Args:
        hidden_size, num_layers, num_heads: backbone size.
        simple_decoder: bilinear x4 + 3x3 conv head instead of two deconvolutions.
        layout: ``coco17`` | ``ap10k`` names written to ``id2label``; anything else gives
            generic labels (then ``num_keypoints`` is required).
        image_size: input ``(height, width)``; patch_size: ``(height, width)``.
    """
    from transformers import VitPoseBackboneConfig, VitPoseConfig

    names = LAYOUTS.get(layout)
    k = num_keypoints or (len(names) if names else None)
    if k is None:
        raise ValueError(f"pose_config: layout {layout!r} needs num_keypoints")
    backbone = VitPoseBackboneConfig(
        image_size=list(image_size),
        patch_size=list(patch_size),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        mlp_ratio=4,
        layer_norm_eps=1e-6,
        qkv_bias=True,
        out_indices=[num_layers],
    )
    id2label = {i: names[i] for i in range(k)} if names and k == len(names) else None
    kw = {"id2label": id2label} if id2label else {"num_labels": k}
    return VitPoseConfig(backbone_config=backbone, use_simple_decoder=simple_decoder, **kw)


def spec_config(spec: PoseModelSpec):
    """The ``VitPoseConfig`` of a registered architecture."""
    return pose_config(
        spec.hidden_size,
        spec.num_layers,
        spec.num_heads,
        simple_decoder=spec.simple_decoder,
        layout=spec.layout,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
    )


def output_channels(id2label: dict[int, str], keypoint_set: str) -> np.ndarray:
    """Model output channel of each keypoint of ``keypoint_set``, from the head's names.

    Args:
        id2label: the model config's channel names.
        keypoint_set: ``coco17`` | ``dog17``.

    Returns:
        ``[K]`` int indices into the heatmap channels, in the keypoint set's order.

    Raises:
        ModelLoadError: the head predicts another layout (e.g. a COCO head for the dog).
    """
    layout = _LAYOUT_FOR_SET.get(keypoint_set)
    if layout is None:
        raise ModelLoadError(f"no pose layout for keypoint set {keypoint_set!r}")
    labels = [str(id2label[i]) for i in sorted(id2label)]
    generic = all(lab == f"LABEL_{i}" for i, lab in enumerate(labels))
    if generic and keypoint_set == "coco17" and len(labels) == 17:
        return np.arange(17)  # transformers' hub ViTPose models carry no names; they are COCO
    names = LAYOUTS[layout]
    if not set(names) <= set(labels):
        raise ModelLoadError(
            f"the pose model's outputs are {labels[:5]}... ({len(labels)} channels), expected "
            f"the {layout} keypoints ({', '.join(names[:3])}, ...) for keypoint set "
            f"{keypoint_set!r}; for the dog convert a ViTPose++ checkpoint with "
            "`mimic2dm pose convert-mmpose CKPT --dataset ap10k --out DIR`"
        )
    target = _TARGET_NAMES[layout]
    want = load_set_names(keypoint_set)
    by_target = {target[n]: labels.index(n) for n in names}
    return np.array([by_target[n] for n in want])


def load_set_names(keypoint_set: str) -> tuple[str, ...]:
    """Keypoint names of a set (``coco17`` | ``dog17``)."""
    from mimic2dm.motion.keypoint_sets import load_keypoint_set

    return load_keypoint_set(keypoint_set).names


class PoseEstimator:
    """Crops boxes, runs a heatmap model and decodes keypoints in image pixels.

    Args:
        heatmap_fn: ``pixel_values [N, 3, H, W] -> heatmaps [N, C, h, w]`` (normalised input).
        input_size: model input ``(height, width)``.
        keypoint_set: the project's set the output is ordered in.
        channels: ``[K]`` heatmap channel of each keypoint (:func:`output_channels`).
        mean, std: RGB normalisation in 0-255 units.
        padding: box enlargement (1.25 as ViTPose).
        refine, blur_kernel: heatmap decoding (:func:`~mimic2dm.video.decode.decode_heatmaps`).
        device: torch device of the model.
        max_batch: crops per forward pass.
    """

    def __init__(
        self,
        heatmap_fn: Callable[[torch.Tensor], torch.Tensor],
        input_size: tuple[int, int],
        keypoint_set: str,
        channels: np.ndarray,
        mean: tuple[float, float, float] = IMAGENET_MEAN,
        std: tuple[float, float, float] = IMAGENET_STD,
        padding: float = BOX_PADDING,
        refine: str = "dark",
        blur_kernel: int = 11,
        device: str | torch.device = "cpu",
        max_batch: int = 32,
    ):
        self.heatmap_fn = heatmap_fn
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.keypoint_set = keypoint_set
        self.channels = np.asarray(channels, dtype=np.int64)
        self.mean, self.std, self.padding = tuple(mean), tuple(std), padding
        self.refine, self.blur_kernel = refine, blur_kernel
        self.device = torch.device(device)
        self.max_batch = max_batch
        self.info: dict[str, Any] = {}

    @torch.inference_mode()
    def predict(
        self,
        frames: np.ndarray,
        boxes: np.ndarray,
        frame_index: np.ndarray,
        rotation: np.ndarray | float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Keypoints of one subject per box.

        Args:
            frames: ``uint8 [B, H, W, 3]`` RGB.
            boxes: ``[N, 4]`` ``(x1, y1, x2, y2)`` image pixels.
            frame_index: ``[N]`` frame of each box.
            rotation: degrees the crop is turned by (scalar or ``[N]``; Yu 2021 trick).

        Returns:
            ``keypoints [N, K, 2]`` image pixels and ``scores [N, K]`` (heatmap maxima).
        """
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        N, K = len(boxes), len(self.channels)
        if N == 0:
            return np.zeros((0, K, 2)), np.zeros((0, K))
        H, W = self.input_size
        rot = np.broadcast_to(np.asarray(rotation, dtype=np.float64), (N,))
        center, scale = box_to_center_scale(boxes, W / H, self.padding, rot)
        A = crop_affine(center, scale, self.input_size, rot)
        kps, scores = np.zeros((N, K, 2)), np.zeros((N, K))
        idx = np.asarray(frame_index)
        for s in range(0, N, self.max_batch):
            sl = slice(s, s + self.max_batch)
            crops = crop_images(frames, idx[sl], A[sl], self.input_size, self.device)
            hm = self.heatmap_fn(normalize(crops, self.mean, self.std))
            hm = hm[:, torch.as_tensor(self.channels, device=hm.device)]
            coords, sc = decode_heatmaps(hm, self.refine, self.blur_kernel)
            kps[sl] = heatmap_to_image(coords, A[sl], self.input_size, tuple(hm.shape[-2:]))
            scores[sl] = sc
        return kps, scores


def _vitpose_fn(model) -> Callable[[torch.Tensor], torch.Tensor]:
    experts = getattr(model.config.backbone_config, "num_experts", 1)

    def fn(pixel_values: torch.Tensor) -> torch.Tensor:
        kw = {}
        if experts > 1:
            # transformers' ViTPose++ keeps one head, trained on COCO (dataset index 0)
            kw["dataset_index"] = torch.zeros(
                len(pixel_values), dtype=torch.long, device=pixel_values.device
            )
        return model(pixel_values=pixel_values, **kw).heatmaps

    return fn


def estimator_from_model(
    model, keypoint_set: str, device: str | torch.device = "cpu", **kw
) -> PoseEstimator:
    """Wrap a ``VitPoseForPoseEstimation`` (moved to ``device``, eval mode)."""
    model = model.to(device).eval()
    bb = model.config.backbone_config
    size = bb.image_size if isinstance(bb.image_size, (list, tuple)) else (bb.image_size,) * 2
    channels = output_channels(model.config.id2label, keypoint_set)
    est = PoseEstimator(
        _vitpose_fn(model), tuple(size), keypoint_set, channels, device=device, **kw
    )
    est.info["pose_params"] = int(sum(p.numel() for p in model.parameters()))
    return est


def read_preprocessor(path: str | os.PathLike) -> dict[str, Any]:
    """``preprocessor_config.json`` of a local model folder (empty dict when absent)."""
    f = Path(path) / "preprocessor_config.json"
    if not f.is_file():
        return {}
    try:
        return json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{f}: could not be read as JSON ({e})") from None


def hf_load_error(what: str, ref: str, e: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"could not load {what} {ref!r} ({type(e).__name__}: {str(e).splitlines()[0][:300]}); "
        "pass a local folder written by save_pretrained / `mimic2dm pose convert-mmpose`, a "
        "model id already in the Hugging Face cache, or --random-weights for an offline smoke run"
    )


def random_vitpose(config):
    """``VitPoseForPoseEstimation(config)`` with random weights, ~10x faster than transformers'
    own initialisation (truncated normals on 90M+ parameters take seconds on a CPU).

    Linear / conv weights and position embeddings ~ N(0, initializer_range), biases 0,
    norms identity (BatchNorm running statistics 0 / 1), as transformers initialises them.
    """
    from torch import nn
    from transformers import VitPoseForPoseEstimation
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = VitPoseForPoseEstimation(config)
    std = float(getattr(config, "initializer_range", 0.02))
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
                mod.weight.normal_(0.0, std)
                if mod.bias is not None:
                    mod.bias.zero_()
            elif isinstance(mod, (nn.LayerNorm, nn.BatchNorm2d)):
                mod.weight.fill_(1.0)
                mod.bias.zero_()
                if isinstance(mod, nn.BatchNorm2d):
                    mod.reset_running_stats()
        model.backbone.embeddings.position_embeddings.normal_(0.0, std)
    return model


def build_pose_model(name_or_path: str, keypoint_set: str, random_weights: bool = False):
    """The ``VitPoseForPoseEstimation`` named by a registry name, a local folder or a model id.

    Args:
        name_or_path: registry name (:data:`POSE_MODELS`), folder or Hugging Face id.
        keypoint_set: the character's set (only used in error messages here).
        random_weights: build the architecture with random weights; a folder / id then
            only provides its ``config.json``.

    Returns:
        ``(model, weights)`` where ``weights`` is ``"random"`` or where they came from.
    """
    from transformers import AutoConfig, VitPoseForPoseEstimation

    from mimic2dm.video.hub import hub_kwargs

    if name_or_path in POSE_MODELS:
        spec = POSE_MODELS.load(name_or_path)
        if random_weights:
            return random_vitpose(spec_config(spec)), "random"
        if spec.hub_id is None:
            raise ModelLoadError(
                f"pose model {name_or_path!r} has no published transformers weights: convert the "
                "official checkpoint with `mimic2dm pose convert-mmpose CKPT --out DIR"
                + (" --dataset ap10k" if spec.layout == "ap10k" else "")
                + "` and pass --pose-model DIR, or use --random-weights"
            )
        name_or_path = spec.hub_id
    hub = hub_kwargs(name_or_path)  # cache only while the hub is offline: no 30 s of retries
    try:
        if random_weights:
            return random_vitpose(AutoConfig.from_pretrained(name_or_path, **hub)), "random"
        return VitPoseForPoseEstimation.from_pretrained(name_or_path, **hub), name_or_path
    except (OSError, ValueError, KeyError) as e:
        raise hf_load_error("pose model", name_or_path, e) from None


def load_pose_estimator(
    name_or_path: str,
    keypoint_set: str,
    random_weights: bool = False,
    device: str | torch.device = "cpu",
    **kw,
) -> PoseEstimator:
    """Build or load a ViTPose model and wrap it as a :class:`PoseEstimator`.

    ``info`` of the result records ``pose_model``, ``pose_weights`` and ``pose_params``.
    Normalisation comes from the folder's ``preprocessor_config.json`` when there is one.
    """
    model, weights = build_pose_model(name_or_path, keypoint_set, random_weights)
    pre = read_preprocessor(name_or_path) if Path(name_or_path).is_dir() else {}
    if "image_mean" in pre and "image_std" in pre:
        scale = 255.0 if max(pre["image_mean"]) <= 1.0 else 1.0
        kw.setdefault("mean", tuple(float(m) * scale for m in pre["image_mean"]))
        kw.setdefault("std", tuple(float(s) * scale for s in pre["image_std"]))
    est = estimator_from_model(model, keypoint_set, device, **kw)
    est.info.update(pose_model=name_or_path, pose_weights=weights)
    return est
