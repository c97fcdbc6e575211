"""The AIST++ protocol: a split of the dataset, one random camera view per sequence.

AIST++ (``aist_plusplus_final/``) lays out its annotations as::

    keypoints2d/<seq>.pkl        keypoints2d [9, T, 17, 3] (x, y, score), det_scores, timestamps
    keypoints3d/<seq>.pkl        keypoints3d, keypoints3d_optim [T, 17, 3] (cm, y-up)
    cameras/mapping.txt          "<seq> <setting>" per line
    cameras/<setting>.json       [{name: c01..c09, size, matrix, rotation, translation, distortions}]
    splits/crossmodal_{train,val,test}.txt   one sequence name per line
    ignore_list.txt              sequences with bad annotations (some copies keep it in splits/)

:func:`split_sequences` reads a split minus the ignore list; :func:`import_split` writes
one clip per sequence (all views, or one seeded random view with its own camera). The
3D keypoints ride along as ground truth for evaluation (MPJPE) only; ``meta`` says so.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np

from mimic2dm.motion.format import Motion2D, MotionFormatError, save_motion2d
from mimic2dm.motion.loaders import load_aist

SPLITS = ("train", "val", "test")
"""The dataset's cross-modal splits (``splits/crossmodal_<split>.txt``)."""

GT3D_USE = "evaluation only"
"""``meta["gt3d"]`` of imported clips: the protocol trains from 2D alone."""


def _read_names(path: Path, what: str) -> list[str]:
    if not path.is_file():
        raise MotionFormatError(
            path, "(file)", "does not exist", f"the AIST++ {what}, one sequence name per line"
        )
    names = [line.strip() for line in path.read_text().splitlines()]
    return [n for n in names if n and not n.startswith("#")]


def ignore_list(anno_dir: str | os.PathLike) -> set[str]:
    """Sequences of ``ignore_list.txt`` (at the top of ``anno_dir`` or in ``splits/``)."""
    anno_dir = Path(anno_dir)
    top, inner = anno_dir / "ignore_list.txt", anno_dir / "splits" / "ignore_list.txt"
    return set(_read_names(top if top.is_file() or not inner.is_file() else inner, "ignore list"))


def split_sequences(anno_dir: str | os.PathLike, split: str) -> list[str]:
    """Sequence names of ``split`` (``train``, ``val``, ``test``) minus the ignore list, file order."""
    if split not in SPLITS:
        raise ValueError(f"AIST++ split {split!r} is not one of {', '.join(SPLITS)}")
    anno_dir = Path(anno_dir)
    names = _read_names(anno_dir / "splits" / f"crossmodal_{split}.txt", f"{split} split list")
    bad = ignore_list(anno_dir)
    return [n for n in dict.fromkeys(names) if n not in bad]


def view_rng(seed: int, seq_name: str) -> np.random.Generator:
    """RNG of one sequence's view draw: depends on the seed and the name, not on the order."""
    return np.random.default_rng([int(seed), zlib.crc32(seq_name.encode())])


def one_random_view(m: Motion2D, seq_name: str, seed: int) -> Motion2D:
    """The clip reduced to one camera view drawn with :func:`view_rng` (recorded in ``meta``)."""
    v = int(view_rng(seed, seq_name).integers(m.num_views))
    out = m.view(v)
    names = m.meta.get("views") or [f"view{i}" for i in range(m.num_views)]
    out.meta |= {"views": [names[v]], "view": names[v], "view_index": v, "view_seed": int(seed)}
    return out


def import_sequence(
    anno_dir: str | os.PathLike,
    seq_name: str,
    *,
    views: list[str] | None = None,
    one_view_seed: int | None = None,
    split: str | None = None,
    fps: float | None = None,
    image_size: tuple[int, int] | None = None,
) -> Motion2D:
    """One sequence as a clip: ``views`` (default all), or one random view when ``one_view_seed``
    is set. ``anno_dir`` may also be a folder of keypoint files or one file; ``fps`` and
    ``image_size`` (uncalibrated views only) go to :func:`~mimic2dm.motion.loaders.load_aist`."""
    meta = {"sequence": seq_name, "gt3d": GT3D_USE} | ({"split": split} if split else {})
    m = load_aist(anno_dir, seq_name, views=views, meta=meta, fps=fps, image_size=image_size)
    return m if one_view_seed is None else one_random_view(m, seq_name, one_view_seed)


def import_split(
    anno_dir: str | os.PathLike,
    split: str,
    out_dir: str | os.PathLike,
    *,
    one_view_seed: int | None = None,
    views: list[str] | None = None,
    fps: float | None = None,
    image_size: tuple[int, int] | None = None,
) -> list[Path]:
    """Write ``out_dir/<seq>.npz`` for every sequence of ``split`` (ignore list removed).

    Args:
        anno_dir: the AIST++ annotation folder (``aist_plusplus_final``).
        split: ``train``, ``val`` or ``test``.
        out_dir: output folder (made if needed).
        one_view_seed: keep one random view per sequence, drawn with this seed.
        views: camera names to keep instead (exclusive with ``one_view_seed``).
        fps, image_size: as in :func:`import_sequence`.

    Returns:
        The files written, in split order.

    Raises:
        MotionFormatError: a split/ignore list or a sequence's files are missing or malformed
            (naming the file); nothing is written for a split that has missing sequences.
    """
    if views and one_view_seed is not None:
        raise ValueError("import_split: give views or one_view_seed, not both")
    anno_dir, out_dir = Path(anno_dir), Path(out_dir)
    names = split_sequences(anno_dir, split)
    if not names:
        raise MotionFormatError(anno_dir / "splits" / f"crossmodal_{split}.txt", "(file)",
                                "lists no sequence outside the ignore list", "sequence names")  # fmt: skip
    missing = [n for n in names if not any((anno_dir / "keypoints2d" / f"{n}{e}").is_file() for e in (".pkl", ".npz"))]  # fmt: skip
    if missing:
        raise MotionFormatError(anno_dir / "keypoints2d", "(folder)",
                                f"lacks {len(missing)} sequence(s) of the {split} split (first: {missing[0]})",
                                f"keypoints2d/<seq>.pkl for every sequence of splits/crossmodal_{split}.txt")  # fmt: skip
    written = []
    for name in names:
        m = import_sequence(anno_dir, name, views=views, one_view_seed=one_view_seed, split=split,
                            fps=fps, image_size=image_size)  # fmt: skip
        path = out_dir / f"{name}.npz"
        save_motion2d(m, path)
        written.append(path)
    return written
