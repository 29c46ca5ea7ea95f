"""Augmentation hyper-parameters in one typed dataclass, defaults as in the YOLO recipes."""

from __future__ import annotations

from dataclasses import dataclass, fields

from lucid_yolo.train.data.augment.geometry import KeepRule
from lucid_yolo.train.exceptions import TrainConfigError


@dataclass(frozen=True)
class AugmentConfig:
    """Training augmentation; validation and prediction use letterbox only.

    Attributes:
        hsv_h: hue gain amplitude, fraction of a full turn (gain = 1 + U(-1, 1) * hsv_h).
        hsv_s: saturation gain amplitude.
        hsv_v: value (brightness) gain amplitude.
        pixels_on_device: the workers draw HSV gains and flips and move the labels, and the
            training device jitters and mirrors the pixels once the batch is there
            (:mod:`~lucid_yolo.train.data.augment.device_pixels`; the same batches bit for bit);
            segment masks travel bit-packed and are unpacked there.
            ``None``: on when the fit trains on CUDA, where it takes about a third of a detect
            sample's CPU time off the workers; off on CPU, where it would only move the work.
        pixels_replayed: with the pixels on a CUDA device, replay that work from a CUDA graph
            per batch shape instead of launching its kernels one by one (the same bits; about
            1.5 ms less host time a batch on the H200). ``None``: as the fit replays (on when
            its module records any CUDA graph, ``ReplayConfig.graphs``); ``False`` runs it
            eagerly.
        degrees: rotation range, degrees (0: off; OBB data benefits from e.g. 180).
        translate: translation range, fraction of the input size.
        scale: scale gain range, factor ~ U(1 - scale, 1 + scale); must stay below 1.
        shear: shear range, degrees.
        fliplr: probability of a horizontal flip.
        mosaic: probability of a 4-image mosaic (until close-mosaic turns it off).
        mixup: probability of blending with a second augmented sample.
        copy_paste: per-instance probability of a mirrored paste (segment only; no-op otherwise).
        min_visible: keep rule: minimum visible fraction of a warped box's area.
        min_size: keep rule: minimum visible box side, pixels.
        max_aspect: keep rule: maximum visible box aspect ratio.
    """

    hsv_h: float = 0.015
    hsv_s: float = 0.7
    hsv_v: float = 0.4
    pixels_on_device: bool | None = None
    pixels_replayed: bool | None = None
    degrees: float = 0.0
    translate: float = 0.1
    scale: float = 0.5
    shear: float = 0.0
    fliplr: float = 0.5
    mosaic: float = 1.0
    mixup: float = 0.0
    copy_paste: float = 0.0
    min_size: float = 2.0
    min_visible: float = 0.1
    max_aspect: float = 20.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(value, bool):
                continue
            if not value >= 0:
                raise TrainConfigError(
                    f"AugmentConfig.{f.name}={value!r} must be >= 0; use 0 to disable it"
                )
        for name in ("fliplr", "mosaic", "mixup", "copy_paste", "min_visible", "translate"):
            if getattr(self, name) > 1:
                raise TrainConfigError(
                    f"AugmentConfig.{name}={getattr(self, name)!r} is a fraction; "
                    "use a value in [0, 1]"
                )
        if self.scale >= 1:
            raise TrainConfigError(
                f"AugmentConfig.scale={self.scale!r} lets the scale factor reach 0; "
                "use a value below 1 (default 0.5)"
            )

    @property
    def hsv_gains(self) -> tuple[float, float, float]:
        """(h, s, v) amplitudes."""
        return (self.hsv_h, self.hsv_s, self.hsv_v)

    @property
    def keep_rule(self) -> KeepRule:
        """The keep rule the geometric augmentations apply."""
        return KeepRule(
            min_size=self.min_size, min_visible=self.min_visible, max_aspect=self.max_aspect
        )

    @classmethod
    def off(cls) -> AugmentConfig:
        """Every augmentation disabled (deterministic letterbox + identity warp)."""
        return cls(
            hsv_h=0,
            hsv_s=0,
            hsv_v=0,
            translate=0,
            scale=0,
            fliplr=0,
            mosaic=0,
            min_size=0,
            min_visible=0,
            max_aspect=float("inf"),
        )


__all__ = ["AugmentConfig"]
