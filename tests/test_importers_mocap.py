"""``data import-deepmimic`` and ``data import-bvh``: 3D motion onto the shared mocap layouts.

The DeepMimic walk, the dog's pace and trot and their character files ship in
``tests/fixtures/deepmimic`` (MIT); the other DeepMimic clips are read from ``../shared`` when
it is there. BVH files are written here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import mujoco
import numpy as np
import torch
from importer_helpers import assert_refused, invoke
from scipy.spatial.transform import Rotation
from shared_data import ALL_DEEPMIMIC_CLIPS, DEEPMIMIC

from mimic2dm.characters import mocap
from mimic2dm.motion.deepmimic import HUMANOID3D_TO_CMU
from mimic2dm.motion.loaders import Y_UP_TO_Z_UP

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "deepmimic"
WALK = FIXTURES / "humanoid3d_walk.txt"
CHARACTER = FIXTURES / "characters" / "humanoid3d.txt"


# ----------------------------------------------------------------------------- DeepMimic
def _character_mjcf(path: Path) -> str:
    """An MJCF of a DeepMimic character file built here from its joints (y-up, as the file):
    free root, ball joints for spherical ones, hinges about z for revolute ones."""
    joints = json.loads(path.read_text())["Skeleton"]["Joints"]
    children = defaultdict(list)
    for j in joints:
        children[j["Parent"]].append(j)

    def body(j) -> str:
        pos = "0 0 0" if j["Parent"] < 0 else f"{j['AttachX']} {j['AttachY']} {j['AttachZ']}"
        joint = {
            "none": "<freejoint/>",
            "spherical": f'<joint name="{j["Name"]}" type="ball"/>',
            "revolute": f'<joint name="{j["Name"]}" type="hinge" axis="0 0 1"/>',
            "fixed": "",
        }[j["Type"]]
        inner = "".join(body(c) for c in children[j["ID"]])
        return f'<body name="{j["Name"]}" pos="{pos}">{joint}<geom size="0.02"/>{inner}</body>'

    return f"<mujoco><worldbody>{body(children[-1][0])}</worldbody></mujoco>"


def _mujoco_positions(frame: list[float], model, data, joints) -> dict[str, np.ndarray]:
    """World joint positions (y-up) of one DeepMimic frame through MuJoCo's kinematics."""
    data.qpos[:7] = frame[1:8]  # root position, root quaternion wxyz (MuJoCo's order too)
    col = 8
    for j in joints[1:]:
        n = {"spherical": 4, "revolute": 1, "fixed": 0}[j["Type"]]
        if n:
            adr = model.jnt_qposadr[model.joint(j["Name"]).id]
            data.qpos[adr : adr + n] = frame[col : col + n]
        col += n
    mujoco.mj_kinematics(model, data)
    return {j["Name"]: data.xpos[model.body(j["Name"]).id].copy() for j in joints}


def test_deepmimic_humanoid_matches_mujoco_fk(tmp_path: Path):
    out = tmp_path / "walk.npz"
    res = invoke("import-deepmimic", WALK, "--out", out)  # finds characters/humanoid3d.txt
    assert res.exit_code == 0, res.output
    assert "39 frames at 30 fps" in res.output
    with np.load(out) as z:
        assert z["local_rotation"].shape == (39, 15, 4) and float(z["fps"]) == 30.0
        assert [str(n) for n in z["node_names"]] == list(HUMANOID3D_TO_CMU)
    clip = mocap.load_cmu_clip(out, dtype=torch.float64)
    pos, _ = mocap.human_fk(clip)  # the forward kinematics data synth uses
    model = mujoco.MjModel.from_xml_string(_character_mjcf(CHARACTER))
    data = mujoco.MjData(model)
    joints = json.loads(CHARACTER.read_text())["Skeleton"]["Joints"]
    frames = json.loads(WALK.read_text())["Frames"]
    for t in (0, 7, 20, 38):
        ref = _mujoco_positions(frames[t], model, data, joints)
        for b, body in enumerate(HUMANOID3D_TO_CMU):
            expected = Y_UP_TO_Z_UP @ ref[HUMANOID3D_TO_CMU[body]]
            np.testing.assert_allclose(pos[t, b].numpy(), expected, atol=0.01, err_msg=body)
            np.testing.assert_allclose(pos[t, b].numpy(), expected, atol=1e-5)


def test_data_synth_runs_on_an_imported_clip(tmp_path: Path):
    clip, out2d = tmp_path / "walk.npz", tmp_path / "walk2d.npz"
    assert invoke("import-deepmimic", WALK, "--out", clip, "--character-file", CHARACTER).exit_code == 0  # fmt: skip
    res = invoke("synth", clip, "--character", "humanoid", "--views", "2", "--out", out2d)
    assert res.exit_code == 0, res.output
    from mimic2dm.motion.format import load_motion2d

    m = load_motion2d(out2d)
    assert m.num_views == 2 and m.num_frames == 39 and m.fps == 30.0
    ankles = m.keypoints3d[:, 15:17, 2]
    assert 0.0 < ankles.min() < 0.15  # the walk's feet reach the floor, not under or far above


def test_deepmimic_resampling_and_fps(tmp_path: Path):
    out = tmp_path / "w60.npz"
    res = invoke("import-deepmimic", WALK, "--out", out, "--fps", "60")
    assert res.exit_code == 0 and "resampled" in res.output, res.output
    with np.load(out) as z:
        assert float(z["fps"]) == 60.0 and z["local_rotation"].shape[0] == 76  # 38 steps of 1/30 s
        r60 = z["root_translation"]
    invoke("import-deepmimic", WALK, "--out", tmp_path / "w30.npz")
    with np.load(tmp_path / "w30.npz") as z:
        # the file's 0.033332 s frames drift 1.3 us a frame from 1/30 s: ~0.1 mm at the end
        np.testing.assert_allclose(r60[::2], z["root_translation"][:38], atol=1e-3)


def _write_motion(path: Path, frames, loop="wrap") -> Path:
    path.write_text(json.dumps({"Loop": loop, "Frames": frames}))
    return path


def test_deepmimic_bad_input(tmp_path: Path):
    frames = json.loads(WALK.read_text())["Frames"][:5]
    out = tmp_path / "out.npz"
    cases = {
        "short_row": ([frames[0], frames[1][:40]] + frames[2:], "Frames[1]", "44 numbers"),
        "empty": ([], "Frames", "missing or empty"),
        "zero_duration": ([[0.0] + frames[0][1:]] + frames[1:], "Frames[0][0]", "> 0"),
        "nan": ([frames[0], frames[1][:5] + [float("nan")] + frames[1][6:]], "Frames[1]", "finite"),
        "zero_quat": (
            [frames[0], frames[1][:8] + [0.0] * 4 + frames[1][12:]],
            "Frames[1]",
            "'chest'",
        ),
    }
    for name, (rows, field, expected) in cases.items():
        src = _write_motion(tmp_path / f"{name}.txt", rows)
        res = invoke("import-deepmimic", src, "--out", out, "--character-file", CHARACTER)
        assert_refused(res, out, str(src), field, expected)
    src = _write_motion(tmp_path / "ok.txt", frames)
    res = invoke("import-deepmimic", src, "--out", out, "--character-file", CHARACTER, "--fps", "0")
    assert_refused(res, out, "field 'fps'", "--fps")
    res = invoke("import-deepmimic", src, "--out", out)  # no characters/ folder beside it
    assert_refused(res, out, str(src), "--character-file")
    truncated = tmp_path / "truncated.txt"
    truncated.write_text(WALK.read_text()[:3000])
    res = invoke("import-deepmimic", truncated, "--out", out, "--character-file", CHARACTER)
    assert_refused(res, out, str(truncated), "not valid JSON")
    wrong = tmp_path / "wrong_character.txt"
    joints = json.loads(CHARACTER.read_text())["Skeleton"]["Joints"][:-1]
    wrong.write_text(json.dumps({"Skeleton": {"Joints": joints}}))
    res = invoke("import-deepmimic", src, "--out", out, "--character-file", wrong)
    assert_refused(res, out, str(wrong), "humanoid3d or dog3d")


def test_deepmimic_shared_humanoid_and_dog_clips(tmp_path: Path):
    """Every DeepMimic humanoid clip imports: the 16 of the shared data, else the 6 shipped
    (walk, run, sideflip, roll (the 60 fps one that is resampled), zombie and stealthy walk)."""
    clips = sorted(DEEPMIMIC.glob("humanoid3d_*.txt"))
    assert len(clips) == (16 if ALL_DEEPMIMIC_CLIPS else 6), clips
    for clip in clips:
        res = invoke("import-deepmimic", clip, "--out", tmp_path / f"{clip.stem}.npz")
        assert res.exit_code == 0, res.output
    assert "resampled" in invoke("import-deepmimic", DEEPMIMIC / "humanoid3d_roll.txt", "--out", tmp_path / "r.npz").output  # fmt: skip
    dog = tmp_path / "trot.npz"
    res = invoke("import-deepmimic", DEEPMIMIC / "dog" / "dog3d_trot.txt", "--out", dog)
    assert res.exit_code == 0 and "dog3d" in res.output, res.output
    with np.load(dog) as z:
        assert z["positions"].shape == (32, 27, 3) and float(z["fps"]) == 60.0
        paws = z["positions"][:, [10, 15, 19, 23], 2]
    assert paws.min() > -0.02 and paws.min() < 0.1  # paw tips on the floor, z-up
    res = invoke("synth", dog, "--character", "dog", "--out", tmp_path / "trot2d.npz")
    assert res.exit_code == 0, res.output


def test_deepmimic_dog_matches_mujoco_fk(tmp_path: Path):
    from mimic2dm.motion.deepmimic import DOG3D_TO_MOCAP

    character, clip = FIXTURES / "characters" / "dog3d.txt", FIXTURES / "dog" / "dog3d_pace.txt"
    out = tmp_path / "pace.npz"
    assert invoke("import-deepmimic", clip, "--out", out).exit_code == 0
    with np.load(out) as z:
        pos = z["positions"]
    model = mujoco.MjModel.from_xml_string(_character_mjcf(character))
    data = mujoco.MjData(model)
    joints = json.loads(character.read_text())["Skeleton"]["Joints"]
    frames = json.loads(clip.read_text())["Frames"]
    for t in (0, 13, 30):
        ref = _mujoco_positions(frames[t], model, data, joints)
        for k, (name, (joint, point)) in enumerate(DOG3D_TO_MOCAP.items()):
            if any(point):  # the snout and tail tips are points off the joints
                continue
            np.testing.assert_allclose(
                pos[t, k], Y_UP_TO_Z_UP @ ref[joint], atol=1e-5, err_msg=name
            )


# ----------------------------------------------------------------------------- BVH
CMU_TREE = [  # (name, parent, offset in cm, y-up; the CMU / cgspeed names, a T-pose)
    ("Hips", None, (0, 0, 0)),
    ("LowerBack", "Hips", (0, 2, 0)), ("Spine", "LowerBack", (0, 10, 0)),
    ("Spine1", "Spine", (0, 12, 0)), ("Neck", "Spine1", (0, 20, 0)), ("Head", "Neck", (0, 8, 0)),
    ("LeftShoulder", "Spine1", (4, 18, 0)), ("LeftArm", "LeftShoulder", (14, 0, 0)),
    ("LeftForeArm", "LeftArm", (28, 0, 0)), ("LeftHand", "LeftForeArm", (25, 0, 0)),
    ("RightShoulder", "Spine1", (-4, 18, 0)), ("RightArm", "RightShoulder", (-14, 0, 0)),
    ("RightForeArm", "RightArm", (-28, 0, 0)), ("RightHand", "RightForeArm", (-25, 0, 0)),
    ("LeftUpLeg", "Hips", (9, -4, 0)), ("LeftLeg", "LeftUpLeg", (0, -42, 0)),
    ("LeftFoot", "LeftLeg", (0, -41, 0)),
    ("RightUpLeg", "Hips", (-9, -4, 0)), ("RightLeg", "RightUpLeg", (0, -42, 0)),
    ("RightFoot", "RightLeg", (0, -41, 0)),
]  # fmt: skip


def _bvh_text(frames: list[dict[str, tuple]], frame_time=1 / 30, count=None) -> str:
    """A BVH with :data:`CMU_TREE`; ``frames``: per frame {joint: (z, x, y) degrees} and
    ``"pos"``: root position (cm). The root has 6 channels, the others ZXY rotations."""
    kids = defaultdict(list)
    for name, parent, _ in CMU_TREE:
        kids[parent].append(name)
    offsets = {n: o for n, _, o in CMU_TREE}

    def block(name: str, depth: int) -> list[str]:
        pad = "  " * depth
        kind = "ROOT" if depth == 0 else "JOINT"
        chans = "6 Xposition Yposition Zposition Zrotation Xrotation Yrotation" if depth == 0 else "3 Zrotation Xrotation Yrotation"  # fmt: skip
        lines = [f"{pad}{kind} {name}", f"{pad}{{", f"{pad}  OFFSET {' '.join(map(str, offsets[name]))}", f"{pad}  CHANNELS {chans}"]  # fmt: skip
        for k in kids[name]:
            lines += block(k, depth + 1)
        if not kids[name]:
            lines += [f"{pad}  End Site", f"{pad}  {{", f"{pad}    OFFSET 0 -5 0", f"{pad}  }}"]
        return lines + [f"{pad}}}"]

    order = []

    def walk(name):
        order.append(name)
        for k in kids[name]:
            walk(k)

    walk("Hips")
    rows = []
    for f in frames:
        row = list(f.get("pos", (0, 90, 0)))
        for name in order:
            row += list(f.get(name, (0, 0, 0)))
        rows.append(" ".join(f"{v:g}" for v in row))
    n = len(frames) if count is None else count
    return "\n".join(["HIERARCHY", *block("Hips", 0), "MOTION", f"Frames: {n}", f"Frame Time: {frame_time}", *rows]) + "\n"  # fmt: skip


def test_bvh_known_rotation_and_position(tmp_path: Path):
    frames = [
        {},  # rest: a T-pose, facing +z (y-up), hips 90 cm up
        {"LeftUpLeg": (0, -90, 0)},  # hip flexed 90 degrees about x: the thigh points forward
        {"pos": (10, 95, 20), "Hips": (0, 0, 90)},  # moved, turned 90 degrees left (about y)
    ]
    src = tmp_path / "walk.bvh"
    src.write_text(_bvh_text(frames))
    out = tmp_path / "walk.npz"
    res = invoke("import-bvh", src, "--out", out)
    assert res.exit_code == 0, res.output
    assert "3 frames at 30 fps" in res.output and "(cm)" in res.output
    clip = mocap.load_cmu_clip(out, dtype=torch.float64)
    pos, rot = mocap.human_fk(clip)
    pos = pos.numpy()
    names = list(HUMANOID3D_TO_CMU)
    i = {n: names.index(n) for n in names}
    # y-up cm -> z-up m: (x, y, z) -> (x, -z, y); facing +z becomes facing -y, left +x
    np.testing.assert_allclose(pos[0, 0], (0, 0, 0.9), atol=1e-6)
    np.testing.assert_allclose(pos[2, 0], (0.1, -0.2, 0.95), atol=1e-6)
    fwd, left = np.array([0, -1.0, 0]), np.array([1.0, 0, 0])
    thigh = pos[0, i["left_thigh"]]
    np.testing.assert_allclose(
        thigh, (0.084887, 0, 0.9), atol=1e-6
    )  # the humanoid's own hip offset
    # rest: legs straight down, arms out to the left / right (T-pose kept)
    np.testing.assert_allclose(pos[0, i["left_shin"]], thigh + (0, 0, -0.421546), atol=1e-6)
    hand = pos[0, i["left_upper_arm"]] + left * (0.274788 + 0.258947)
    np.testing.assert_allclose(pos[0, i["left_hand"]], hand, atol=1e-6)
    # frame 1: the left knee is one thigh length ahead of the hip
    np.testing.assert_allclose(pos[1, i["left_shin"]], thigh + 0.421546 * fwd, atol=1e-6)
    np.testing.assert_allclose(pos[1, i["right_shin"]], pos[0, i["right_shin"]], atol=1e-6)
    # frame 2: the turn is the pelvis' rotation, 90 degrees about +z
    turn = Rotation.from_quat(rot[2, 0].numpy()) * Rotation.from_quat(rot[0, 0].numpy()).inv()
    np.testing.assert_allclose(turn.as_rotvec(), (0, 0, np.pi / 2), atol=1e-6)
    res = invoke("synth", out, "--character", "humanoid", "--out", tmp_path / "w2d.npz")
    assert res.exit_code == 0, res.output


def test_bvh_scale_option_and_names(tmp_path: Path):
    text = _bvh_text([{}, {}]).replace("LeftForeArm", "mixamorig:LeftForeArm")
    src = tmp_path / "a.bvh"
    src.write_text(text)
    res = invoke("import-bvh", src, "--out", tmp_path / "a.npz", "--scale", "0.02")
    assert res.exit_code == 0 and "scale 0.02" in res.output, res.output
    with np.load(tmp_path / "a.npz") as z:
        np.testing.assert_allclose(z["root_translation"][0], (0, 0, 1.8), atol=1e-6)


def test_bvh_bad_input(tmp_path: Path):
    out = tmp_path / "out.npz"
    good = _bvh_text([{}, {}, {}])
    cases = {
        "truncated": (good.rsplit("\n", 2)[0] + "\n", "Frames", "2 data lines"),
        "empty": ("", "(file)", "HIERARCHY"),
        "frame_time": (_bvh_text([{}, {}, {}], frame_time=0), "Frame Time", "> 0"),
        "short_line": (
            good.rstrip("\n").rsplit(" ", 3)[0] + "\n",
            "MOTION line 3",
            "finite numbers",
        ),
        "no_head": (good.replace("Head\n", "Skull\n"), "HIERARCHY", "head"),
        "hierarchy": (good.split("MOTION")[0][:300], "HIERARCHY", "lacks"),
    }
    for name, (text, field, expected) in cases.items():
        src = tmp_path / f"{name}.bvh"
        src.write_text(text)
        assert_refused(invoke("import-bvh", src, "--out", out), out, str(src), field, expected)
    src = tmp_path / "ok.bvh"
    src.write_text(good)
    res = invoke("import-bvh", src, "--out", out, "--fps", "60")
    assert_refused(res, out, str(src), "Frame Time", "30 fps")
    res = invoke("import-bvh", src, "--out", out, "--scale", "-1")
    assert_refused(res, out, str(src), "scale", "--scale")
    tiny = tmp_path / "tiny.bvh"
    tiny.write_text(_bvh_text([{}, {}]).replace("-42 0", "-0.004 0").replace("-41 0", "-0.004 0"))
    assert_refused(invoke("import-bvh", tiny, "--out", out), out, str(tiny), "OFFSET", "--scale")
