"""Video -> 2D motion: RT-DETR detection, top-down ViTPose, tracking, clean-up, writing.

Modules (heavy dependencies such as transformers are imported on first use):
- :mod:`~mimic2dm.video.io`: PyAV reading / writing, :class:`~mimic2dm.video.io.VideoError`.
- :mod:`~mimic2dm.video.transforms`: box -> centre/scale, affine crops, normalisation,
  heatmap -> image pixels.
- :mod:`~mimic2dm.video.decode`: heatmap decoding (argmax + DARK / quarter offset).
- :mod:`~mimic2dm.video.pose`: ViTPose registry and :class:`~mimic2dm.video.pose.PoseEstimator`.
- :mod:`~mimic2dm.video.detector`: RT-DETR registry and :class:`~mimic2dm.video.detector.Detector`.
- :mod:`~mimic2dm.video.convert`: mmpose ViTPose checkpoints -> transformers.
- :mod:`~mimic2dm.video.tracking`, :mod:`~mimic2dm.video.filtering`: subject / ball tracks,
  gap filling and smoothing, rotation choice (Yu 2021).
- :mod:`~mimic2dm.video.follow`: following the subject and ball boxes between detections
  (``--detect-every K``) by template matching, with re-detection triggers.
- :mod:`~mimic2dm.video.pipeline`: ``extract_clip`` / ``extract_videos`` and the manifest.
- :mod:`~mimic2dm.video.preview`, :mod:`~mimic2dm.video.bench`, :mod:`~mimic2dm.video.cli`.

See ``docs/video.md``.
"""
