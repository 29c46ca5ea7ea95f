"""Loss gains: the one place where the named loss terms are weighted against each other."""

from __future__ import annotations

from dataclasses import dataclass, fields

from torch import Tensor


@dataclass(frozen=True)
class LossGains:
    """Multipliers of the named loss terms; a term's name is the field it is weighted by.

    The box and classification gains are the published YOLO defaults the optimiser settings were
    tuned with; the others were chosen so every term starts at a comparable magnitude and are not
    tuned yet.

    Attributes:
        box: ``1 - CIoU`` (detect, segment, pose) or ``1 - ProbIoU`` (OBB).
        cls: BCE against the soft alignment targets.
        l1: L1 on the four edge distances in stride units (takes the slot DFL had in earlier YOLOs).
        mask: prototype mask BCE, cropped and area-normalised.
        semantic: auxiliary semantic segmentation, BCE + Dice.
        kpt_nll: Laplace negative log-likelihood of the keypoints (RLE-style).
        kpt_oks: ``1 - OKS`` of the keypoints.
        kpt_vis: keypoint visibility BCE.
        angle: OBB angle term ``sin^2`` of the angle error, weighted by elongation.
    """

    box: float = 7.5
    cls: float = 0.5
    l1: float = 1.5
    mask: float = 7.5
    semantic: float = 1.0
    kpt_nll: float = 1.0
    kpt_oks: float = 12.0
    kpt_vis: float = 1.0
    angle: float = 1.0

    def apply(self, terms: dict[str, Tensor]) -> dict[str, Tensor]:
        """Multiply each term by its gain.

        Args:
            terms: unweighted scalar terms keyed by gain name.

        Returns:
            The weighted terms, same keys.

        Raises:
            KeyError: for a term without a gain.
        """
        known = {field.name for field in fields(self)}
        unknown = sorted(set(terms) - known)
        if unknown:
            raise KeyError(f"loss terms {unknown!r} have no gain: add them to LossGains {known!r}")
        return {name: value * getattr(self, name) for name, value in terms.items()}


__all__ = ["LossGains"]
