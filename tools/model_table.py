"""Parameter and FLOP table of every registered model, as the Models log page shows it.

Run (from the repository root)::

    uv run python tools/model_table.py

Each model is built on the meta device (no memory, no weights) with the class count of the dataset
its published numbers were measured on (COCO 80, COCO-pose 1, DOTA 15) and summarised at the
task's published input size. The published columns of the log page come from the table in
``tests/models/test_summary.py``, which checks them within ±3 %.
"""

from __future__ import annotations

import torch

from lucid_yolo.models import create_model, list_models, model_spec, model_summary

DATASET_CLASSES = {"detect": 80, "segment": 80, "pose": 1, "obb": 15}
"""Classes of the datasets the published tables were measured on, per task."""


def main() -> None:
    print("| model | px | train params | train GFLOPs | inference params | inference GFLOPs |")
    print("|---|---|---|---|---|---|")
    for name in list_models():
        spec = model_spec(name)
        with torch.device("meta"):
            model = create_model(name, num_classes=DATASET_CLASSES[spec.task], seed=None)
        s = model_summary(model, spec.image_size)
        print(
            f"| {name} | {spec.image_size} | {s.train_params / 1e6:.2f}M | {s.train_gflops:.1f} "
            f"| {s.infer_params / 1e6:.3f}M | {s.infer_gflops:.2f} |"
        )


if __name__ == "__main__":
    main()
