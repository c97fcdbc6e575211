"""ViTPose and RT-DETR built from configs with random weights: sizes, shapes, class and
keypoint mapping, loading from folders, clear errors offline."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded in tests

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mimic2dm.motion.keypoint_sets import COCO17, DOG17
from mimic2dm.video.detector import (
    COCO80,
    DETECTORS,
    class_ids,
    load_detector,
    postprocess,
)
from mimic2dm.video.pose import (
    AP10K_NAMES,
    AP10K_TO_DOG17,
    POSE_MODELS,
    ModelLoadError,
    estimator_from_model,
    load_pose_estimator,
    output_channels,
    pose_config,
    spec_config,
)
from mimic2dm.video.transforms import box_to_center_scale

TINY_POSE = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "image_size": (64, 48)}


def vitpose_params(d: int, layers: int, simple: bool, k: int = 17, patches: int = 192) -> int:
    """ViTPose parameter count by hand: patch conv, positions (+1 slot), blocks, norm, head."""
    blocks = layers * (12 * d * d + 13 * d)  # 2 LN, qkv, proj, fc1 (4d), fc2
    head = d * k * 9 + k if simple else d * 256 * 16 + 256 * 256 * 16 + 2 * 512 + 256 * k + k
    return (3 * 256 * d + d) + (patches + 1) * d + blocks + 2 * d + head


def test_vitpose_b_real_parameter_count_and_output_shapes():
    est = load_pose_estimator("vitpose-b", "coco17", random_weights=True)
    assert est.info["pose_params"] == 89_994_513 == vitpose_params(768, 12, False)
    assert est.input_size == (256, 192) and est.info["pose_weights"] == "random"
    with torch.inference_mode():
        hm = est.heatmap_fn(torch.zeros(1, 3, 256, 192))
    assert hm.shape == (1, 17, 64, 48) and torch.isfinite(hm).all()


@pytest.mark.parametrize(
    "name", ["vitpose-s", "vitpose-l", "vitpose-h-simple", "vitpose-plus-b-ap10k"]
)
def test_registered_configs_have_the_official_sizes(name):
    from transformers import VitPoseForPoseEstimation

    spec = POSE_MODELS.load(name)
    cfg = spec_config(spec)
    bb = cfg.backbone_config
    sizes = {"s": (384, 12, 12), "b": (768, 12, 12), "l": (1024, 24, 16), "h": (1280, 32, 16)}
    size = name.split("-")[2] if name.startswith("vitpose-plus") else name.split("-")[1]
    assert (bb.hidden_size, bb.num_hidden_layers, bb.num_attention_heads) == sizes[size]
    assert bb.layer_norm_eps == 1e-6 and list(bb.image_size) == [256, 192] and cfg.num_labels == 17
    names = [cfg.id2label[i] for i in range(17)]
    assert names == list(COCO17.names if spec.layout == "coco17" else AP10K_NAMES)  # head order
    with torch.device("meta"):  # shapes only: ViTPose-H has 630M parameters
        model = VitPoseForPoseEstimation(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert n == vitpose_params(bb.hidden_size, bb.num_hidden_layers, spec.simple_decoder)


def test_tiny_vitpose_estimator_mechanics():
    from transformers import VitPoseForPoseEstimation

    torch.manual_seed(0)
    model = VitPoseForPoseEstimation(pose_config(**TINY_POSE))
    est = estimator_from_model(model, "coco17", max_batch=3)
    frames = np.random.default_rng(1).integers(0, 255, (2, 120, 160, 3), dtype=np.uint8)
    boxes = np.array(
        [[10, 10, 60, 100], [50, 5, 150, 110], [0, 0, 20, 20], [30, 30, 90, 90]], float
    )
    kps, scores = est.predict(
        frames, boxes, np.array([0, 0, 1, 1]), rotation=np.array([0, 90, 180, 270])
    )
    assert kps.shape == (4, 17, 2) and scores.shape == (4, 17)
    assert np.isfinite(kps).all() and np.isfinite(scores).all()
    # keypoints come from inside the padded (rotated) crop of their box
    c, s = box_to_center_scale(boxes, 48 / 64, rotation=np.array([0, 90, 180, 270]))
    assert np.all(
        np.linalg.norm(kps - c[:, None], axis=-1)
        <= 0.5 * np.linalg.norm(s, axis=-1)[:, None] + 1e-6
    )
    empty = est.predict(frames, np.zeros((0, 4)), np.zeros(0, int))
    assert empty[0].shape == (0, 17, 2)


def test_output_channels_coco_and_ap10k_to_dog17():
    generic = {i: f"LABEL_{i}" for i in range(17)}
    np.testing.assert_array_equal(output_channels(generic, "coco17"), np.arange(17))
    named = {i: n for i, n in enumerate(reversed(COCO17.names))}
    assert [named[c] for c in output_channels(named, "coco17")] == list(COCO17.names)
    cfg = pose_config(**TINY_POSE, layout="ap10k")
    ch = output_channels(cfg.id2label, "dog17")
    assert [AP10K_TO_DOG17[cfg.id2label[c]] for c in ch] == list(DOG17.names)
    assert (
        AP10K_TO_DOG17["L_F_Paw"] == "left_front_paw"
        and AP10K_TO_DOG17["Root of tail"] == "root_of_tail"
    )
    with pytest.raises(ModelLoadError, match="ap10k"):
        output_channels(generic, "dog17")  # a COCO (or unnamed) head cannot serve the dog
    with pytest.raises(ModelLoadError, match="coco17"):
        output_channels(cfg.id2label, "coco17")


def test_detector_postprocess_known_answer():
    classes = {"person": 0, "dog": 16, "sports ball": 32}
    logits = torch.full((1, 3, 80), -10.0)
    logits[0, 0, 0] = 2.0  # person, sigmoid 0.881
    logits[0, 1, 32] = 0.0  # ball, 0.5
    logits[0, 2, 0] = -2.0  # person below threshold (0.119)
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.6], [0.1, 0.9, 0.05, 0.1], [0.5, 0.5, 1.0, 1.0]]])
    (det,) = postprocess(logits, boxes, (640, 480), classes, threshold=0.3)
    np.testing.assert_allclose(det["person"][0], [[256, 96, 384, 384]], atol=1e-4)
    np.testing.assert_allclose(det["person"][1], [1 / (1 + np.exp(-2))], atol=1e-6)
    np.testing.assert_allclose(det["sports ball"][0], [[48, 408, 80, 456]], atol=1e-4)
    assert det["dog"][0].shape == (0, 4)
    # boxes are clipped to the image
    (det,) = postprocess(logits, boxes * 2, (640, 480), classes, threshold=0.3)
    assert det["person"][0].max() <= 640 and det["person"][0].min() >= 0


def test_class_ids_by_name_or_coco_order():
    assert class_ids(dict(enumerate(COCO80))) == {"person": 0, "dog": 16, "sports ball": 32}
    assert class_ids({i: f"LABEL_{i}" for i in range(80)})["sports ball"] == 32
    assert class_ids({3: "Person", 7: "dog", 9: "sports ball"}) == {
        "person": 3,
        "dog": 7,
        "sports ball": 9,
    }
    with pytest.raises(ModelLoadError, match="sports ball"):
        class_ids({0: "person", 1: "dog"})


def tiny_detector_model():
    from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrResNetConfig

    bb = RTDetrResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                            layer_type="basic", out_indices=[2, 3, 4])  # fmt: skip
    cfg = RTDetrConfig(backbone_config=bb, id2label=dict(enumerate(COCO80)), encoder_hidden_dim=32,
                       encoder_in_channels=[32, 64, 128], encoder_ffn_dim=64, encoder_attention_heads=2,
                       d_model=32, decoder_in_channels=[32, 32, 32], decoder_ffn_dim=64, decoder_layers=1,
                       decoder_attention_heads=2, num_queries=20, num_denoising=0)  # fmt: skip
    torch.manual_seed(0)
    return RTDetrForObjectDetection(cfg)


def test_tiny_rtdetr_from_saved_folder_and_random_weights(tmp_path: Path):
    model = tiny_detector_model()
    model.save_pretrained(tmp_path / "det")
    (tmp_path / "det/preprocessor_config.json").write_text(
        json.dumps({"size": {"height": 160, "width": 160}})
    )
    det = load_detector(str(tmp_path / "det"), threshold=0.0)
    assert det.input_size == (160, 160) and det.info["detector_weights"] == str(tmp_path / "det")
    frames = np.random.default_rng(0).integers(0, 255, (2, 90, 120, 3), dtype=np.uint8)
    out = det.detect(frames)
    assert len(out) == 2 and set(out[0]) == {"person", "dog", "sports ball"}
    boxes, scores = out[0]["person"]
    assert boxes.shape == (10, 4) and np.all(np.diff(scores) <= 0)  # best first, max_per_class
    assert np.all(boxes[:, [0, 2]] <= 120) and np.all(boxes[:, [1, 3]] <= 90)
    # the same weights give the same boxes; random weights from the folder's config do not
    again = load_detector(str(tmp_path / "det"), threshold=0.0).detect(frames)
    np.testing.assert_allclose(again[0]["person"][0], boxes, atol=1e-4)
    rnd = load_detector(str(tmp_path / "det"), random_weights=True, threshold=0.0)
    assert rnd.info["detector_weights"] == "random"


def test_registered_detectors_build_with_random_weights():
    for name in DETECTORS.names():
        with torch.device("meta"):
            from transformers import RTDetrForObjectDetection

            from mimic2dm.video.detector import detector_config

            m = RTDetrForObjectDetection(detector_config(DETECTORS.load(name)))
        n = sum(p.numel() for p in m.parameters())
        assert (
            {"rtdetr-r18": 15e6, "rtdetr-r50": 40e6}[name]
            < n
            < {"rtdetr-r18": 25e6, "rtdetr-r50": 45e6}[name]
        )
    assert class_ids(m.config.id2label)["dog"] == 16


def test_missing_weights_fail_clearly_offline(tmp_path: Path):
    with pytest.raises(ModelLoadError, match="no published transformers weights.*convert-mmpose"):
        load_pose_estimator("vitpose-l", "coco17")
    with pytest.raises(ModelLoadError, match="--dataset ap10k"):
        load_pose_estimator("vitpose-plus-b-ap10k", "dog17")
    with pytest.raises(ModelLoadError, match="random-weights"):
        load_pose_estimator(str(tmp_path / "nowhere"), "coco17")
    with pytest.raises(ModelLoadError, match="random-weights"):
        load_detector(str(tmp_path / "nowhere"))
