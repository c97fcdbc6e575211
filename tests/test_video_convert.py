"""mmpose ViTPose checkpoints -> transformers: on state_dicts built here with mmpose's
parameter names and shapes, checked against a reference forward pass written from the
mmpose modules' definitions (fused qkv, pos_embed with / without the class slot, LN eps 1e-6)."""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded in tests

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from mimic2dm.motion.keypoint_sets import DOG17
from mimic2dm.video.cli import pose_app
from mimic2dm.video.convert import (
    DATASETS,
    ConversionError,
    convert_state_dict,
    convert_to_model,
    infer_config,
    load_checkpoint,
)
from mimic2dm.video.pose import AP10K_NAMES, load_pose_estimator, output_channels

D, L, HEADS, K = 32, 2, 2, 17
IMG = (64, 48)  # tiny input: 4 x 3 patches of 16 px
TINY = {"image_size": IMG, "num_heads": HEADS}  # shapes alone tell neither for a tiny model


def _ln(g, p, d):
    g(f"{p}.weight", d, scale=0.1, offset=1.0)
    g(f"{p}.bias", d, scale=0.1)


def _head(g, p, d, k, simple):
    if simple:
        g(f"{p}.final_layer.weight", k, d, 3, 3)
        g(f"{p}.final_layer.bias", k)
        return
    for j, cin in ((0, d), (3, 256)):
        g(f"{p}.deconv_layers.{j}.weight", cin, 256, 4, 4)  # ConvTranspose2d: [in, out, k, k]
        _ln(g, f"{p}.deconv_layers.{j + 1}", 256)  # BatchNorm affine
        g(f"{p}.deconv_layers.{j + 1}.running_mean", 256, scale=0.1)
        g(f"{p}.deconv_layers.{j + 1}.running_var", 256, scale=0.1, offset=1.0, positive=True)
        g.sd[f"{p}.deconv_layers.{j + 1}.num_batches_tracked"] = torch.tensor(7)
    g(f"{p}.final_layer.weight", k, 256, 1, 1)
    g(f"{p}.final_layer.bias", k)


class _Gen:
    def __init__(self, seed: int, device: str = "cpu"):
        self.sd: dict[str, torch.Tensor] = {}
        self.gen = torch.Generator().manual_seed(seed)
        self.device = device

    def __call__(self, name, *shape, scale=0.05, offset=0.0, positive=False):
        if self.device == "meta":
            self.sd[name] = torch.empty(shape, device="meta")
            return
        x = torch.randn(shape, generator=self.gen) * scale
        self.sd[name] = (x.abs() if positive else x) + offset


def mmpose_state_dict(
    layout="vitpose", d=D, layers=L, k=K, simple=False, img=IMG, moe=None, seed=0, device="cpu"
):
    """A state_dict with mmpose's names and shapes.

    ``layout``: ``vitpose`` (official ViTPose repo) or ``mmpose1`` (mmpose 1.x + mmpretrain).
    ``moe``: ``(num_experts, part_features)`` for a ViTPose++ checkpoint (vitpose layout).
    """
    g = _Gen(seed, device)
    n = (img[0] // 16) * (img[1] // 16)
    if layout == "vitpose":
        g("backbone.patch_embed.proj.weight", d, 3, 16, 16)
        g("backbone.patch_embed.proj.bias", d)
        g("backbone.pos_embed", 1, n + 1, d, scale=0.5)  # slot 0 is added to every patch
        blk, n1, n2, fc1, fc2, last, head = (
            "blocks",
            "norm1",
            "norm2",
            "mlp.fc1",
            "mlp.fc2",
            "last_norm",
            "keypoint_head",
        )
    else:
        g("backbone.patch_embed.projection.weight", d, 3, 16, 16)
        g("backbone.patch_embed.projection.bias", d)
        g("backbone.pos_embed", 1, n, d, scale=0.5)  # mmpretrain without class token: no slot
        blk, n1, n2, fc1, fc2, last, head = (
            "layers",
            "ln1",
            "ln2",
            "ffn.layers.0.0",
            "ffn.layers.1",
            "ln1",
            "head",
        )
        g.sd["data_preprocessor.mean"] = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
    part = moe[1] if moe else 0
    for i in range(layers):
        p = f"backbone.{blk}.{i}"
        _ln(g, f"{p}.{n1}", d)
        g(f"{p}.attn.qkv.weight", 3 * d, d, scale=0.3)
        g(f"{p}.attn.qkv.bias", 3 * d)
        g(f"{p}.attn.proj.weight", d, d)
        g(f"{p}.attn.proj.bias", d)
        _ln(g, f"{p}.{n2}", d)
        g(f"{p}.{fc1}.weight", 4 * d, d)
        g(f"{p}.{fc1}.bias", 4 * d)
        g(f"{p}.{fc2}.weight", d - part, 4 * d)
        g(f"{p}.{fc2}.bias", d - part)
        for e in range(moe[0] if moe else 0):
            g(f"{p}.mlp.experts.{e}.weight", part, 4 * d)
            g(f"{p}.mlp.experts.{e}.bias", part)
    _ln(g, f"backbone.{last}", d)
    _head(g, head, d, k, simple)
    if moe:
        g.sd["backbone.cls_token"] = (
            torch.zeros(1, 1, d) if device != "meta" else torch.empty(1, 1, d, device="meta")
        )
        for j, kk in enumerate((14, 16, 17, 17, 133)):  # aic, mpii, ap10k, apt36k, wholebody
            _head(
                g, f"associate_keypoint_heads.{j}", d, max(kk, 20) if j == 2 else kk, simple
            )  # ap10k padded
    return g.sd


def reference_forward(sd, x, layout="vitpose", heads=HEADS, simple=False, expert=None, k=K):
    """ViTPose as mmpose computes it, straight from the state_dict (eval mode)."""
    blk, n1, n2, fc1, fc2, last, head = (
        ("blocks", "norm1", "norm2", "mlp.fc1", "mlp.fc2", "last_norm", "keypoint_head")
        if layout == "vitpose"
        else ("layers", "ln1", "ln2", "ffn.layers.0.0", "ffn.layers.1", "ln1", "head")
    )
    if expert:
        head = f"associate_keypoint_heads.{expert - 1}"
    proj = "proj" if layout == "vitpose" else "projection"
    y = F.conv2d(
        x,
        sd[f"backbone.patch_embed.{proj}.weight"],
        sd[f"backbone.patch_embed.{proj}.bias"],
        stride=16,
        padding=2,
    )
    B, Dm, Hp, Wp = y.shape
    y = y.flatten(2).transpose(1, 2)
    pos = sd["backbone.pos_embed"]
    y = y + (pos[:, 1:] + pos[:, :1] if layout == "vitpose" else pos)
    ln = lambda t, p: F.layer_norm(t, (Dm,), sd[f"{p}.weight"], sd[f"{p}.bias"], eps=1e-6)  # noqa: E731
    i = 0
    while f"backbone.{blk}.{i}.attn.qkv.weight" in sd:
        p = f"backbone.{blk}.{i}"
        qkv = F.linear(ln(y, f"{p}.{n1}"), sd[f"{p}.attn.qkv.weight"], sd[f"{p}.attn.qkv.bias"])
        q, kk, v = qkv.reshape(B, -1, 3, heads, Dm // heads).permute(2, 0, 3, 1, 4)
        att = ((q @ kk.transpose(-2, -1)) * (Dm // heads) ** -0.5).softmax(-1) @ v
        y = y + F.linear(
            att.transpose(1, 2).reshape(B, -1, Dm),
            sd[f"{p}.attn.proj.weight"],
            sd[f"{p}.attn.proj.bias"],
        )
        h = F.gelu(F.linear(ln(y, f"{p}.{n2}"), sd[f"{p}.{fc1}.weight"], sd[f"{p}.{fc1}.bias"]))
        out = F.linear(h, sd[f"{p}.{fc2}.weight"], sd[f"{p}.{fc2}.bias"])
        if expert is not None and f"{p}.mlp.experts.0.weight" in sd:
            out = torch.cat(
                [
                    out,
                    F.linear(
                        h,
                        sd[f"{p}.mlp.experts.{expert}.weight"],
                        sd[f"{p}.mlp.experts.{expert}.bias"],
                    ),
                ],
                -1,
            )
        y = y + out
        i += 1
    y = ln(y, f"backbone.{last}").transpose(1, 2).reshape(B, Dm, Hp, Wp)
    if simple:
        y = F.interpolate(F.relu(y), scale_factor=4, mode="bilinear", align_corners=False)
        y = F.conv2d(y, sd[f"{head}.final_layer.weight"], sd[f"{head}.final_layer.bias"], padding=1)
    else:
        for j in (0, 3):
            y = F.conv_transpose2d(y, sd[f"{head}.deconv_layers.{j}.weight"], stride=2, padding=1)
            bn = f"{head}.deconv_layers.{j + 1}"
            y = F.relu(
                F.batch_norm(
                    y,
                    sd[f"{bn}.running_mean"],
                    sd[f"{bn}.running_var"],
                    sd[f"{bn}.weight"],
                    sd[f"{bn}.bias"],
                    eps=1e-5,
                )
            )
        y = F.conv2d(y, sd[f"{head}.final_layer.weight"], sd[f"{head}.final_layer.bias"])
    return y[:, :k]


@pytest.fixture(scope="module")
def pixels() -> torch.Tensor:
    return torch.randn(2, 3, *IMG, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("layout", ["vitpose", "mmpose1"])
@pytest.mark.parametrize("simple", [False, True])
def test_converted_model_matches_mmpose_forward(layout, simple, pixels):
    sd = mmpose_state_dict(layout, simple=simple)
    model, facts = convert_to_model(sd, "coco", **TINY)
    assert facts["layout"] == layout and facts["decoder"] == ("simple" if simple else "classic")
    assert facts["pos_slot_added"] == (layout == "mmpose1")
    assert model.config.backbone_config.layer_norm_eps == 1e-6
    with torch.no_grad():
        ours = model(pixel_values=pixels).heatmaps
        ref = reference_forward(sd, pixels, layout, simple=simple)
    assert ours.shape == (2, K, 16, 12) == ref.shape
    torch.testing.assert_close(ours, ref, atol=2e-5, rtol=1e-4)
    pos = model.backbone.embeddings.position_embeddings.detach()
    if layout == "mmpose1":
        assert float(pos[0, 0].abs().max()) == 0.0  # the added slot is zero
    assert list(model.config.id2label.values())[:2] == ["nose", "left_eye"]


def test_qkv_split_rows_are_query_key_value():
    sd = mmpose_state_dict()
    cfg, facts = infer_config(sd, **TINY)
    hf, _ = convert_state_dict(sd, facts)
    w = sd["backbone.blocks.1.attn.qkv.weight"]
    base = "backbone.encoder.layer.1.attention.attention"
    torch.testing.assert_close(hf[f"{base}.query.weight"], w[:D])
    torch.testing.assert_close(hf[f"{base}.key.weight"], w[D : 2 * D])
    torch.testing.assert_close(hf[f"{base}.value.weight"], w[2 * D :])


def test_vitpose_plus_expert_and_head_of_ap10k(pixels):
    sd = mmpose_state_dict(moe=(6, 8), seed=3)
    model, facts = convert_to_model(sd, "ap10k", **TINY)
    assert (
        facts["moe"]
        and facts["head"] == "associate_keypoint_heads.2"
        and facts["num_keypoints"] == 17
    )
    assert "backbone.cls_token" in facts["ignored"] and any(
        "experts.0." in k for k in facts["ignored"]
    )
    with torch.no_grad():
        ours = model(pixel_values=pixels).heatmaps
        ref = reference_forward(sd, pixels, expert=DATASETS.index("ap10k"), k=17)
    torch.testing.assert_close(ours, ref, atol=2e-5, rtol=1e-4)
    # the padded ap10k head (20 channels) is cut to AP-10K's 17, named for dog17
    assert tuple(model.config.id2label[i] for i in range(17)) == AP10K_NAMES
    ch = output_channels(model.config.id2label, "dog17")
    assert [AP10K_NAMES[c] for c in ch][:8] == [
        "L_Eye",
        "R_Eye",
        "Nose",
        "Neck",
        "Root of tail",
        "L_Shoulder",
        "L_Elbow",
        "L_F_Paw",
    ]
    assert DOG17.names[7] == "left_front_paw"


def test_vitpose_b_shapes_fill_the_transformers_model():
    """A full-size ViTPose-B (mmpose 1.x names) on the meta device: strict name and shape match."""
    from transformers import VitPoseForPoseEstimation

    sd = mmpose_state_dict("mmpose1", d=768, layers=12, img=(256, 192), device="meta")
    cfg, facts = infer_config(sd)
    assert (facts["hidden_size"], facts["num_layers"], facts["num_heads"]) == (768, 12, 12)
    assert facts["image_size"] == [256, 192] and facts["decoder"] == "classic"
    hf, ignored = convert_state_dict(sd, facts)
    assert ignored == ["data_preprocessor.mean"]
    with torch.device("meta"):
        model = VitPoseForPoseEstimation(cfg)
    own = model.state_dict()
    assert set(hf) == set(own)
    assert all(hf[k].shape == own[k].shape for k in own)
    assert sum(p.numel() for p in model.parameters()) == 89_994_513  # BN buffers are not parameters


def test_conversion_errors():
    with pytest.raises(ConversionError, match="not a ViTPose checkpoint"):
        infer_config({"conv1.weight": torch.zeros(1)})
    sd = mmpose_state_dict()
    sd["backbone.pos_embed"] = torch.zeros(1, 50, D)
    with pytest.raises(ConversionError, match="--image-size"):
        infer_config(sd)
    with pytest.raises(ConversionError, match="unknown dataset"):
        infer_config(mmpose_state_dict(), "horses", **TINY)
    sd = mmpose_state_dict(d=40)
    with pytest.raises(ConversionError, match="--num-heads"):
        infer_config(sd, image_size=IMG)
    assert infer_config(sd, num_heads=4, image_size=IMG)[1]["num_heads"] == 4


def test_cli_convert_mmpose_then_load_for_dog(tmp_path: Path, pixels):
    sd = mmpose_state_dict(moe=(6, 8), seed=4)
    ckpt = tmp_path / "vitpose_plus.pth"
    torch.save(
        {"meta": {"epoch": 210}, "state_dict": {f"module.{k}": v for k, v in sd.items()}}, ckpt
    )
    runner = CliRunner()
    res = runner.invoke(
        pose_app,
        [
            "convert-mmpose",
            str(ckpt),
            "--out",
            str(tmp_path / "hf"),
            "--dataset",
            "ap10k",
            "--image-size",
            "64",
            "48",
            "--num-heads",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "ViTPose++ expert ap10k" in res.output and "17 keypoints" in res.output
    rec = json.loads((tmp_path / "hf/mimic2dm_conversion.json").read_text())
    assert rec["head"] == "associate_keypoint_heads.2" and len(rec["source_sha256"]) == 64
    est = load_pose_estimator(str(tmp_path / "hf"), "dog17")
    assert est.info["pose_weights"] == str(tmp_path / "hf") and est.keypoint_set == "dog17"
    with torch.no_grad():
        ref = reference_forward(sd, pixels, expert=3, k=17)
        torch.testing.assert_close(est.heatmap_fn(pixels), ref, atol=2e-5, rtol=1e-4)
    # the COCO head cannot serve the dog, and says how to fix it
    res = runner.invoke(
        pose_app,
        [
            "convert-mmpose",
            str(ckpt),
            "--out",
            str(tmp_path / "coco"),
            "--image-size",
            "64",
            "48",
            "--num-heads",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    with pytest.raises(Exception, match="--dataset ap10k"):
        load_pose_estimator(str(tmp_path / "coco"), "dog17")


def test_cli_convert_refuses_pickled_objects_unless_trusted(tmp_path: Path):
    ckpt = tmp_path / "odd.pth"
    torch.save({"meta": argparse.Namespace(config="x"), "state_dict": mmpose_state_dict()}, ckpt)
    runner = CliRunner()
    args = [
        "convert-mmpose",
        str(ckpt),
        "--out",
        str(tmp_path / "a"),
        "--image-size",
        "64",
        "48",
        "--num-heads",
        "2",
    ]
    res = runner.invoke(pose_app, args)
    assert res.exit_code == 1 and "--trust-checkpoint" in res.output
    res = runner.invoke(pose_app, [*args, "--trust-checkpoint"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        pose_app, ["convert-mmpose", str(tmp_path / "missing.pth"), "--out", str(tmp_path / "b")]
    )
    assert res.exit_code == 1 and "does not exist" in res.output
    assert sorted(load_checkpoint(ckpt, trust=True)) == sorted(mmpose_state_dict())
