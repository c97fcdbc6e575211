"""Reading and writing videos with PyAV.

Frames are RGB ``uint8`` arrays ``[H, W, 3]``; batches are ``[B, H, W, 3]``. Every failure
to open or decode a file is a :class:`VideoError` naming the file, so that a batch can
report it and go on with the next video.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


class VideoError(RuntimeError):
    """A video could not be opened, decoded or written.

    Attributes:
        file: the video path.
        problem: what went wrong (without the file name).
    """

    def __init__(self, file: str | os.PathLike, problem: str):
        self.file, self.problem = str(file), problem
        super().__init__(f"{self.file}: {problem}")


@dataclass(frozen=True)
class VideoInfo:
    """What the pipeline needs to know about a video before decoding it.

    Attributes:
        path: the file.
        fps: frames per second (> 0), from the stream's average rate.
        width, height: frame size in pixels.
        num_frames: frame count stored in the container (0 when the container does not say;
            the pipeline counts the frames it decodes).
    """

    path: str
    fps: float
    width: int
    height: int
    num_frames: int

    @property
    def image_size(self) -> tuple[int, int]:
        """``(width, height)`` as stored in 2D-motion files."""
        return (self.width, self.height)


def _open(path: str | os.PathLike):
    if not Path(path).is_file():
        raise VideoError(path, "does not exist or is not a file")
    if Path(path).stat().st_size == 0:
        raise VideoError(path, "is empty (0 bytes), expected a video file")
    try:
        container = av.open(str(path), mode="r")
    except (av.FFmpegError, OSError, ValueError) as e:
        raise VideoError(
            path, f"could not be opened as a video ({type(e).__name__}: {e})"
        ) from None
    if not container.streams.video:
        container.close()
        raise VideoError(path, "has no video stream")
    return container


def probe_video(path: str | os.PathLike) -> VideoInfo:
    """Open ``path`` and read its frame rate and frame size (no decoding).

    Raises:
        VideoError: missing/empty/unreadable file, no video stream, no frame rate or size.
    """
    container = _open(path)
    try:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        width, height = int(stream.codec_context.width), int(stream.codec_context.height)
        num_frames = int(stream.frames or 0)
    finally:
        container.close()
    if not np.isfinite(fps) or fps <= 0:
        raise VideoError(path, "has no frame rate, expected a video stream with fps > 0")
    if width <= 0 or height <= 0:
        raise VideoError(
            path, f"has frame size {width}x{height}, expected positive width and height"
        )
    return VideoInfo(str(path), fps, width, height, num_frames)


def iter_frames(path: str | os.PathLike, batch: int = 1) -> Iterator[np.ndarray]:
    """Decode ``path`` and yield RGB frames in batches.

    Args:
        path: the video.
        batch: frames per yielded array (the last batch may be shorter).

    Yields:
        ``uint8 [B, H, W, 3]`` with ``1 <= B <= batch``.

    Raises:
        VideoError: the file cannot be opened, decoding fails (naming the frame), or it
            contains no decodable frame.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    container = _open(path)
    buf: list[np.ndarray] = []
    count = 0
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        try:
            for frame in container.decode(stream):
                buf.append(frame.to_ndarray(format="rgb24"))
                count += 1
                if len(buf) == batch:
                    yield np.stack(buf)
                    buf = []
        except (av.FFmpegError, OSError, ValueError) as e:
            raise VideoError(
                path, f"decoding failed after {count} frame(s) ({type(e).__name__}: {e})"
            ) from None
    finally:
        container.close()
    if buf:
        yield np.stack(buf)
    if count == 0:
        raise VideoError(path, "contains no decodable video frames")


class VideoWriter:
    """Write RGB frames with PyAV: H.264 (MPEG-4 if x264 is missing), or lossless FFV1.

    Lossy output is yuv420p, so odd frame sizes are padded by one black pixel. Lossless
    output (``lossless=True``; use a ``.mkv`` file) keeps every RGB value, which known-answer
    tests need. Use as a context manager; :meth:`write` takes ``uint8 [H, W, 3]`` or
    ``[B, H, W, 3]``.
    """

    def __init__(
        self, path: str | os.PathLike, fps: float, width: int, height: int, lossless: bool = False
    ):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        pad = 0 if lossless else 1
        self.width, self.height = width + pad * (width % 2), height + pad * (height % 2)
        self._container = av.open(str(self.path), mode="w")
        rate = Fraction(fps).limit_denominator(1001)
        codec = "ffv1" if lossless else ("libx264" if "libx264" in av.codecs_available else "mpeg4")
        self._stream = self._container.add_stream(codec, rate=rate)
        self._stream.width, self._stream.height = self.width, self.height
        self._stream.pix_fmt = "bgr0" if lossless else "yuv420p"
        if codec == "libx264":
            self._stream.options = {"crf": "23", "preset": "veryfast"}

    def write(self, frames: np.ndarray) -> None:
        """Encode one frame ``[H, W, 3]`` or a batch ``[B, H, W, 3]`` (uint8 RGB)."""
        frames = frames[None] if frames.ndim == 3 else frames
        for img in frames:
            h, w = img.shape[:2]
            if (h, w) != (self.height, self.width):
                img = np.pad(img, ((0, self.height - h), (0, self.width - w), (0, 0)))
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            for packet in self._stream.encode(frame):
                self._container.mux(packet)

    def close(self) -> None:
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_video(
    path: str | os.PathLike, frames: Iterable[np.ndarray], fps: float, lossless: bool = False
) -> None:
    """Write an iterable of RGB frames ``[H, W, 3]`` (all the same size) to ``path``
    (see :class:`VideoWriter` for ``lossless``)."""
    it = iter(frames)
    first = next(it, None)
    if first is None:
        raise ValueError(f"write_video({path}): no frames")
    with VideoWriter(path, fps, first.shape[1], first.shape[0], lossless) as w:
        w.write(first)
        for img in it:
            w.write(img)
