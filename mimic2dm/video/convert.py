"""Map an mmpose ViTPose checkpoint onto transformers' ``VitPoseForPoseEstimation``.

Two parameter layouts are read (the architecture is inferred from the shapes):

- ``vitpose`` — the official ViTPose / ViTPose++ repository (an mmpose 0.x fork):
  ``backbone.patch_embed.proj``, ``backbone.pos_embed [1, 1 + N, D]``,
  ``backbone.blocks.<i>.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}``,
  ``backbone.last_norm``, ``keypoint_head.{deconv_layers.<j>, final_layer}``; ViTPose++ adds
  ``mlp.experts.<e>`` (the fc2 output is shared part + expert part) and
  ``associate_keypoint_heads.<e-1>`` for datasets other than COCO.
- ``mmpose1`` — mmpose 1.x with mmpretrain's ``VisionTransformer``:
  ``backbone.patch_embed.projection``, ``backbone.pos_embed [1, N, D]`` (no class-token
  slot), ``backbone.layers.<i>.{ln1, attn.qkv, attn.proj, ln2, ffn.layers.0.0, ffn.layers.1}``,
  ``backbone.ln1``, ``head.{deconv_layers.<j>, final_layer}``.

What changes on the way: the fused ``qkv`` projection is split into query, key and value
(rows in that order); the position embedding gets transformers' extra slot 0 (which is
added to every patch, so it is zero when the source has none); layer norms use eps 1e-6
as in both sources; for ViTPose++ the chosen dataset's expert is concatenated to the shared
``fc2`` (exactly what the MoE layer computes for that dataset) and its head is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from mimic2dm.video.pose import LAYOUTS, VITPOSE_HEADS, pose_config

DATASETS = ("coco", "aic", "mpii", "ap10k", "apt36k", "wholebody")
"""ViTPose++ dataset order: expert ``e`` and (for ``e > 0``) ``associate_keypoint_heads.<e-1>``."""
DATASET_KEYPOINTS = {"coco": 17, "aic": 14, "mpii": 16, "ap10k": 17, "apt36k": 17, "wholebody": 133}
DATASET_LAYOUT = {"coco": "coco17", "ap10k": "ap10k", "apt36k": "ap10k"}
_KNOWN_SIZES = ((256, 192), (384, 288), (256, 256))


class ConversionError(ValueError):
    """The checkpoint is not a ViTPose checkpoint this converter understands."""


_BACKBONE = {
    "vitpose": [
        (r"backbone\.patch_embed\.proj\.", "backbone.embeddings.patch_embeddings.projection."),
        (r"backbone\.last_norm\.", "backbone.layernorm."),
        (r"backbone\.blocks\.(\d+)\.norm1\.", r"backbone.encoder.layer.\1.layernorm_before."),
        (
            r"backbone\.blocks\.(\d+)\.attn\.proj\.",
            r"backbone.encoder.layer.\1.attention.output.dense.",
        ),
        (r"backbone\.blocks\.(\d+)\.norm2\.", r"backbone.encoder.layer.\1.layernorm_after."),
        (r"backbone\.blocks\.(\d+)\.mlp\.fc1\.", r"backbone.encoder.layer.\1.mlp.fc1."),
        (r"backbone\.blocks\.(\d+)\.mlp\.fc2\.", r"backbone.encoder.layer.\1.mlp.fc2."),
    ],
    "mmpose1": [
        (
            r"backbone\.patch_embed\.projection\.",
            "backbone.embeddings.patch_embeddings.projection.",
        ),
        (r"backbone\.ln1\.", "backbone.layernorm."),
        (r"backbone\.layers\.(\d+)\.ln1\.", r"backbone.encoder.layer.\1.layernorm_before."),
        (
            r"backbone\.layers\.(\d+)\.attn\.proj\.",
            r"backbone.encoder.layer.\1.attention.output.dense.",
        ),
        (r"backbone\.layers\.(\d+)\.ln2\.", r"backbone.encoder.layer.\1.layernorm_after."),
        (r"backbone\.layers\.(\d+)\.ffn\.layers\.0\.0\.", r"backbone.encoder.layer.\1.mlp.fc1."),
        (r"backbone\.layers\.(\d+)\.ffn\.layers\.1\.", r"backbone.encoder.layer.\1.mlp.fc2."),
    ],
}
_BLOCK = {"vitpose": "blocks", "mmpose1": "layers"}
_HEAD = {  # classic decoder: ConvTranspose, BN, ReLU, ConvTranspose, BN, ReLU; then final conv
    "deconv_layers.0.": "head.deconv1.",
    "deconv_layers.1.": "head.batchnorm1.",
    "deconv_layers.3.": "head.deconv2.",
    "deconv_layers.4.": "head.batchnorm2.",
    "final_layer.": "head.conv.",
}


def load_checkpoint(path: str | os.PathLike, trust: bool = False) -> dict[str, torch.Tensor]:
    """The state_dict of an mmpose checkpoint (``state_dict`` / ``model`` wrappers and a
    ``module.`` prefix are removed).

    Args:
        path: ``.pth`` file.
        trust: unpickle arbitrary objects (only for files you trust); by default only
            tensors and plain containers are read.
    """
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: checkpoint does not exist or is not a file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=not trust)
    except Exception as e:  # noqa: BLE001 - pickle errors come in many types
        hint = "" if trust else "; if you trust the file, retry with --trust-checkpoint"
        raise ConversionError(
            f"{path}: could not be loaded ({type(e).__name__}: {e}){hint}"
        ) from None
    sd = ckpt
    for key in ("state_dict", "model"):
        if isinstance(sd, dict) and isinstance(sd.get(key), dict):
            sd = sd[key]
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ConversionError(
            f"{path}: expected a dict of tensors (a state_dict), got {type(sd).__name__}"
        )
    return {k.removeprefix("module."): v for k, v in sd.items()}


def detect_layout(sd: dict[str, torch.Tensor]) -> str:
    """``"vitpose"`` or ``"mmpose1"`` from the parameter names."""
    if "backbone.patch_embed.proj.weight" in sd:
        return "vitpose"
    if "backbone.patch_embed.projection.weight" in sd:
        return "mmpose1"
    sample = ", ".join(list(sd)[:4])
    raise ConversionError(
        "not a ViTPose checkpoint: expected backbone.patch_embed.proj.weight (ViTPose repo) or "
        f"backbone.patch_embed.projection.weight (mmpose 1.x), found {sample}, ..."
    )


def _head_prefix(sd: dict, layout: str, dataset: str) -> str:
    if layout == "mmpose1":
        return "head."
    idx = DATASETS.index(dataset)
    prefix = "keypoint_head." if idx == 0 else f"associate_keypoint_heads.{idx - 1}."
    if idx > 0 and f"{prefix}final_layer.weight" not in sd:
        return "keypoint_head."  # a checkpoint already split per dataset (tools/model_split.py)
    return prefix


def _image_size(
    num_pos: int, patch: tuple[int, int], layout: str, image_size
) -> tuple[tuple[int, int], bool]:
    """Input size and whether ``pos_embed`` lacks the class-token slot."""
    sizes = [tuple(image_size)] if image_size else list(_KNOWN_SIZES)
    for h, w in sizes:
        n = (h // patch[0]) * (w // patch[1])
        if num_pos in (n, n + 1):
            return (h, w), num_pos == n
    raise ConversionError(
        f"pos_embed has {num_pos} positions, which matches none of the input sizes "
        f"{', '.join(f'{h}x{w}' for h, w in sizes)} with {patch[0]}x{patch[1]} patches; pass --image-size H W"
    )


def infer_config(
    sd: dict[str, torch.Tensor],
    dataset: str = "coco",
    num_heads: int | None = None,
    image_size: tuple[int, int] | None = None,
):
    """``VitPoseConfig`` of an mmpose ViTPose state_dict, from its shapes.

    Args:
        sd: mmpose state_dict.
        dataset: one of :data:`DATASETS`: keypoint names, and for ViTPose++ the expert
            and head to keep.
        num_heads: attention heads (shapes do not tell them; default from the width:
            384/768 -> 12, 1024/1280 -> 16).
        image_size: input ``(height, width)`` when not one of 256x192, 384x288, 256x256.

    Returns:
        ``(config, facts)`` where ``facts`` describes the source (layout, moe, ...).
    """
    if dataset not in DATASETS:
        raise ConversionError(f"unknown dataset {dataset!r}; valid: {', '.join(DATASETS)}")
    layout = detect_layout(sd)
    patch_w = sd[f"backbone.patch_embed.{'proj' if layout == 'vitpose' else 'projection'}.weight"]
    D, patch = int(patch_w.shape[0]), (int(patch_w.shape[2]), int(patch_w.shape[3]))
    pos = sd.get("backbone.pos_embed")
    if pos is None or pos.ndim != 3 or pos.shape[-1] != D:
        raise ConversionError(
            f"backbone.pos_embed must be [1, N, {D}], got {None if pos is None else list(pos.shape)}"
        )
    size, no_slot = _image_size(int(pos.shape[1]), patch, layout, image_size)
    pat = re.compile(rf"backbone\.{_BLOCK[layout]}\.(\d+)\.")
    layers = 1 + max((int(m.group(1)) for k in sd if (m := pat.match(k))), default=-1)
    heads = num_heads or VITPOSE_HEADS.get(D)
    if layers == 0 or heads is None:
        raise ConversionError(
            f"found {layers} transformer blocks of width {D}; pass --num-heads for a non-standard width"
        )
    prefix = _head_prefix(sd, layout, dataset)
    final = sd.get(f"{prefix}final_layer.weight")
    if final is None:
        raise ConversionError(
            f"no {prefix}final_layer.weight in the checkpoint (the keypoint head)"
        )
    simple = f"{prefix}deconv_layers.0.weight" not in sd
    k = min(int(final.shape[0]), DATASET_KEYPOINTS[dataset])  # ViTPose++ heads may be padded
    layout_names = DATASET_LAYOUT.get(dataset, "generic")
    cfg = pose_config(
        D, layers, heads, simple_decoder=simple, layout=layout_names, num_keypoints=k,
        image_size=size, patch_size=patch,
    )  # fmt: skip
    moe = any(".mlp.experts." in key for key in sd) and _fc2_rows(sd, layout) < D
    facts = {"layout": layout, "dataset": dataset, "head": prefix.rstrip("."), "moe": moe,
             "pos_slot_added": no_slot, "hidden_size": D, "num_layers": layers, "num_heads": heads,
             "decoder": "simple" if simple else "classic", "num_keypoints": k, "image_size": list(size)}  # fmt: skip
    return cfg, facts


def _fc2_rows(sd: dict, layout: str) -> int:
    name = "mlp.fc2" if layout == "vitpose" else "ffn.layers.1"
    return int(sd[f"backbone.{_BLOCK[layout]}.0.{name}.weight"].shape[0])


def _rename(key: str, layout: str) -> str | None:
    for pattern, repl in _BACKBONE[layout]:
        new, n = re.subn("^" + pattern, repl, key)
        if n:
            return new
    return None


def convert_state_dict(
    sd: dict[str, torch.Tensor], facts: dict[str, Any]
) -> tuple[dict, list[str]]:
    """Rename and reshape an mmpose state_dict for transformers (see the module docstring).

    Args:
        sd: mmpose state_dict.
        facts: from :func:`infer_config`.

    Returns:
        ``(hf_state_dict, ignored_keys)``; ignored keys are other datasets' heads and
        experts, the unused class token and data-preprocessor buffers.
    """
    layout, D, k = facts["layout"], facts["hidden_size"], facts["num_keypoints"]
    expert = DATASETS.index(facts["dataset"])
    head = facts["head"] + "."
    qkv = re.compile(rf"^backbone\.{_BLOCK[layout]}\.(\d+)\.attn\.qkv\.(weight|bias)$")
    out: dict[str, torch.Tensor] = {}
    ignored: list[str] = []
    for key, val in sd.items():
        if key == "backbone.pos_embed":
            slot = torch.zeros_like(val[:, :1])  # transformers adds slot 0 to every patch
            out["backbone.embeddings.position_embeddings"] = (
                torch.cat([slot, val], 1) if facts["pos_slot_added"] else val
            )
        elif m := qkv.match(key):
            q, kk, v = val.split(D, dim=0)
            base = f"backbone.encoder.layer.{m.group(1)}.attention.attention"
            for name, part in (("query", q), ("key", kk), ("value", v)):
                out[f"{base}.{name}.{m.group(2)}"] = part
        elif key.startswith(head):
            rest = key[len(head) :]
            new = next(
                (hf + rest[len(src) :] for src, hf in _HEAD.items() if rest.startswith(src)), None
            )
            if new is None:
                raise ConversionError(f"unexpected head parameter {key!r}")
            out[new] = val[:k] if rest.startswith("final_layer.") else val
        elif (new := _rename(key, layout)) is not None:
            out[new] = val
        else:
            ignored.append(key)
    if facts["moe"]:
        _merge_experts(sd, out, layout, expert)
    return out, ignored


def _merge_experts(sd: dict, out: dict, layout: str, expert: int) -> None:
    """Append expert ``expert``'s rows to each shared ``fc2`` (ViTPose++ for one dataset)."""
    for i in range(
        1 + max(int(k.split(".")[2]) for k in sd if k.startswith(f"backbone.{_BLOCK[layout]}."))
    ):
        for p in ("weight", "bias"):
            src = f"backbone.{_BLOCK[layout]}.{i}.mlp.experts.{expert}.{p}"
            if src not in sd:
                raise ConversionError(
                    f"ViTPose++ checkpoint has no {src} (expert of dataset {DATASETS[expert]})"
                )
            dst = f"backbone.encoder.layer.{i}.mlp.fc2.{p}"
            out[dst] = torch.cat([out[dst], sd[src]], 0)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert_to_model(
    sd: dict[str, torch.Tensor],
    dataset: str = "coco",
    num_heads: int | None = None,
    image_size: tuple[int, int] | None = None,
):
    """A ``VitPoseForPoseEstimation`` holding the weights of an mmpose state_dict.

    Returns:
        ``(model, facts)``; ``facts`` adds ``ignored`` (source keys not used).

    Raises:
        ConversionError: unknown layout, or the mapped weights do not fill the model exactly.
    """
    from transformers import VitPoseForPoseEstimation

    cfg, facts = infer_config(sd, dataset, num_heads, image_size)
    hf, ignored = convert_state_dict(sd, facts)
    model = VitPoseForPoseEstimation(cfg).eval()
    own = model.state_dict()
    missing = sorted(set(own) - set(hf))
    unexpected = sorted(set(hf) - set(own))
    wrong = [
        f"{k} {list(hf[k].shape)} != {list(own[k].shape)}"
        for k in own
        if k in hf and hf[k].shape != own[k].shape
    ]
    if missing or unexpected or wrong:
        raise ConversionError(
            "the checkpoint does not fill the inferred model: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}, wrong shapes {wrong[:5]}"
        )
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in hf.items()}, strict=True)
    facts["ignored"] = ignored
    return model, facts


def convert_mmpose_checkpoint(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    dataset: str = "coco",
    num_heads: int | None = None,
    image_size: tuple[int, int] | None = None,
    trust: bool = False,
) -> dict[str, Any]:
    """Convert ``ckpt`` and write a transformers folder (``config.json``,
    ``model.safetensors``, ``mimic2dm_conversion.json``) to ``out_dir``.

    Returns:
        The conversion record also written to ``mimic2dm_conversion.json``.
    """
    sd = load_checkpoint(ckpt, trust)
    model, facts = convert_to_model(sd, dataset, num_heads, image_size)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    record = {
        "source": str(Path(ckpt).resolve()),
        "source_sha256": _sha256(Path(ckpt)),
        "keypoint_names": LAYOUTS.get(DATASET_LAYOUT.get(dataset, ""), None),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        **{k: v for k, v in facts.items() if k != "ignored"},
        "ignored_keys": len(facts["ignored"]),
    }
    (out / "mimic2dm_conversion.json").write_text(json.dumps(record, indent=2) + "\n")
    return record
