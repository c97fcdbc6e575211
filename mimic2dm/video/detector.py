"""Person / dog / ball detection with RT-DETR (transformers' ``RTDetrForObjectDetection``).

Registered architectures (:data:`DETECTORS`), COCO-80 classes, 640x640 input:

| name | backbone | transformers weights |
|---|---|---|
| ``rtdetr-r18`` | ResNet-18-vd | ``PekingU/rtdetr_r18vd_coco_o365`` |
| ``rtdetr-r50`` | ResNet-50-vd | ``PekingU/rtdetr_r50vd_coco_o365`` |

Any other RT-DETR (v1 or v2) folder or model id works too. Classes are found by name in
the model's ``id2label`` (``person``, ``dog``, ``sports ball``), else by their COCO-80
index when the model has 80 generic labels (random weights).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mimic2dm.utils.registry import Registry
from mimic2dm.video.pose import ModelLoadError, hf_load_error, read_preprocessor
from mimic2dm.video.transforms import as_tensor_frames

COCO80 = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant",
    "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip
"""COCO-80 class names in the contiguous order RT-DETR's COCO heads use."""

CLASSES = ("person", "dog", "sports ball")
"""Classes the pipeline asks for."""

Detections = dict[str, tuple[np.ndarray, np.ndarray]]
"""Per frame: class name -> (``boxes [n, 4]`` xyxy image pixels, ``scores [n]``), best first."""


@dataclass(frozen=True)
class DetectorSpec:
    """A registered RT-DETR architecture."""

    name: str
    hub_id: str
    depths: tuple[int, ...]
    layer_type: str
    hidden_sizes: tuple[int, ...]
    hidden_expansion: float
    decoder_layers: int


DETECTORS: Registry[DetectorSpec] = Registry("detector")
for _spec in (
    DetectorSpec(
        "rtdetr-r18",
        "PekingU/rtdetr_r18vd_coco_o365",
        (2, 2, 2, 2),
        "basic",
        (64, 128, 256, 512),
        0.5,
        3,
    ),
    DetectorSpec(
        "rtdetr-r50",
        "PekingU/rtdetr_r50vd_coco_o365",
        (3, 4, 6, 3),
        "bottleneck",
        (256, 512, 1024, 2048),
        1.0,
        6,
    ),
):
    DETECTORS.register(_spec.name, lambda s=_spec: s)
DEFAULT_DETECTOR = "rtdetr-r50"


def detector_config(spec: DetectorSpec):
    """``RTDetrConfig`` of a registered architecture with the 80 COCO classes named."""
    from transformers import RTDetrConfig, RTDetrResNetConfig

    backbone = RTDetrResNetConfig(
        depths=list(spec.depths),
        layer_type=spec.layer_type,
        hidden_sizes=list(spec.hidden_sizes),
        out_indices=[2, 3, 4],
    )
    return RTDetrConfig(
        backbone_config=backbone,
        encoder_in_channels=list(spec.hidden_sizes[1:]),
        hidden_expansion=spec.hidden_expansion,
        decoder_layers=spec.decoder_layers,
        id2label=dict(enumerate(COCO80)),
    )


def class_ids(id2label: dict[int, str], wanted: tuple[str, ...] = CLASSES) -> dict[str, int]:
    """Output index of each wanted class: by name, else COCO-80 order for 80 generic labels.

    Raises:
        ModelLoadError: the classes cannot be found.
    """
    names = {str(v).lower(): int(k) for k, v in id2label.items()}
    if all(w in names for w in wanted):
        return {w: names[w] for w in wanted}
    if len(id2label) == 80 and all(str(v).startswith("LABEL_") for v in id2label.values()):
        return {w: COCO80.index(w) for w in wanted}
    raise ModelLoadError(
        f"the detector's classes ({len(id2label)}: {', '.join(list(names)[:6])}, ...) do not "
        f"include {', '.join(w for w in wanted if w not in names)}; expected a COCO detector"
    )


def postprocess(
    logits: torch.Tensor,
    pred_boxes: torch.Tensor,
    image_size: tuple[int, int],
    classes: dict[str, int],
    threshold: float,
    max_per_class: int = 10,
    sigmoid: bool = True,
) -> list[Detections]:
    """Boxes per frame and class from RT-DETR outputs.

    Args:
        logits: ``[B, Q, C]`` class logits (focal-loss heads: independent sigmoids).
        pred_boxes: ``[B, Q, 4]`` ``(cx, cy, w, h)`` relative to the image.
        image_size: ``(width, height)`` of the original frames.
        classes: class name -> logit index.
        threshold: minimum score kept.
        max_per_class: at most this many boxes per class and frame (best first).
        sigmoid: False for softmax heads whose last class is "no object".

    Returns:
        One :data:`Detections` per frame.
    """
    probs = logits.sigmoid() if sigmoid else logits.softmax(-1)[..., :-1]
    W, H = image_size
    cx, cy, w, h = pred_boxes.unbind(-1)
    xyxy = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)
    xyxy = (xyxy * torch.tensor([W, H, W, H], dtype=xyxy.dtype, device=xyxy.device)).clamp_min(0)
    xyxy = torch.minimum(xyxy, torch.tensor([W, H, W, H], dtype=xyxy.dtype, device=xyxy.device))
    out: list[Detections] = []
    for b in range(logits.shape[0]):
        frame: Detections = {}
        for name, c in classes.items():
            s = probs[b, :, c]
            keep = torch.nonzero(s >= threshold).flatten()
            keep = keep[torch.argsort(s[keep], descending=True)][:max_per_class]
            frame[name] = (
                xyxy[b, keep].double().cpu().numpy().reshape(-1, 4),
                s[keep].double().cpu().numpy(),
            )
        out.append(frame)
    return out


class Detector:
    """Batched RT-DETR inference on RGB frames.

    Args:
        model: an RT-DETR ``...ForObjectDetection`` (any module returning ``logits`` and
            ``pred_boxes``).
        classes: class name -> logit index (:func:`class_ids`).
        threshold: minimum score.
        input_size: ``(height, width)`` the frames are resized to (no aspect keeping, as
            RT-DETR's image processor).
        rescale: factor applied to 0-255 pixels; mean/std: optional normalisation after it.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        classes: dict[str, int],
        threshold: float = 0.3,
        input_size: tuple[int, int] = (640, 640),
        rescale: float = 1 / 255,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
        max_per_class: int = 10,
        device: str | torch.device = "cpu",
    ):
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.classes, self.threshold = dict(classes), float(threshold)
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.rescale, self.mean, self.std = rescale, mean, std
        self.max_per_class = max_per_class
        self.sigmoid = bool(getattr(model.config, "use_focal_loss", True))
        self.info: dict = {"detector_params": int(sum(p.numel() for p in model.parameters()))}

    @torch.inference_mode()
    def detect(self, frames: np.ndarray) -> list[Detections]:
        """Detections of ``frames`` (``uint8 [B, H, W, 3]``), one dict per frame."""
        x = as_tensor_frames(frames).to(self.device).permute(0, 3, 1, 2).float()
        H, W = x.shape[-2:]
        x = F.interpolate(
            x, size=self.input_size, mode="bilinear", antialias=True, align_corners=False
        )
        x = x * self.rescale
        if self.mean is not None and self.std is not None:
            m = torch.as_tensor(self.mean, device=x.device).view(1, 3, 1, 1)
            s = torch.as_tensor(self.std, device=x.device).view(1, 3, 1, 1)
            x = (x - m) / s
        out = self.model(pixel_values=x)
        return postprocess(
            out.logits,
            out.pred_boxes,
            (W, H),
            self.classes,
            self.threshold,
            self.max_per_class,
            self.sigmoid,
        )


def _preprocessing(path: str | os.PathLike) -> dict:
    """Resize / rescale / normalisation arguments from a local ``preprocessor_config.json``."""
    pre = read_preprocessor(path) if Path(path).is_dir() else {}
    kw: dict = {}
    size = pre.get("size") or {}
    if "height" in size and "width" in size:
        kw["input_size"] = (int(size["height"]), int(size["width"]))
    if pre.get("do_rescale", True) is False:
        kw["rescale"] = 1.0
    elif "rescale_factor" in pre:
        kw["rescale"] = float(pre["rescale_factor"])
    if pre.get("do_normalize") and "image_mean" in pre:
        kw["mean"], kw["std"] = tuple(pre["image_mean"]), tuple(pre["image_std"])
    return kw


def load_detector(
    name_or_path: str,
    random_weights: bool = False,
    threshold: float = 0.3,
    device: str | torch.device = "cpu",
    **kw,
) -> Detector:
    """Build or load an RT-DETR detector from a registry name, folder or model id.

    With ``random_weights`` a registered name builds its architecture and a folder / id
    only provides its ``config.json``. ``info`` records ``detector`` and ``detector_weights``.
    """
    from transformers import AutoConfig, AutoModelForObjectDetection, RTDetrForObjectDetection

    from mimic2dm.video.hub import hub_kwargs

    ref = name_or_path
    if name_or_path in DETECTORS:
        spec = DETECTORS.load(name_or_path)
        if random_weights:
            model, weights = RTDetrForObjectDetection(detector_config(spec)), "random"
        ref = spec.hub_id
    if not (name_or_path in DETECTORS and random_weights):
        hub = hub_kwargs(ref)  # cache only while the hub is offline: no 30 s of retries
        try:
            if random_weights:
                model, weights = (
                    AutoModelForObjectDetection.from_config(AutoConfig.from_pretrained(ref, **hub)),
                    "random",
                )
            else:
                model, weights = AutoModelForObjectDetection.from_pretrained(ref, **hub), ref
        except (OSError, ValueError, KeyError) as e:
            raise hf_load_error("detector", ref, e) from None
    for k, v in _preprocessing(name_or_path).items():
        kw.setdefault(k, v)
    det = Detector(model, class_ids(model.config.id2label), threshold, device=device, **kw)
    det.info.update(detector=name_or_path, detector_weights=weights)
    return det
