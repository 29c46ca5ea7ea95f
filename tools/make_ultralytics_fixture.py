"""Write the small Ultralytics checkpoints and eval outputs the CPU tests import.

For each task, a YOLO26 network built by Ultralytics from its YAML at a reduced scale (depth 0.5,
width 0.0625, channels capped at 256 before the width: the nano topology at a few percent of its
parameters, so the eight files stay under 3 MB and the trained one is 1.2 MB), with small class
counts (and 4 keypoints for pose, 8 prototypes for segment) so that the importer must take them
from the file; BatchNorm
statistics are made non-trivial, the network is saved as Ultralytics saves a model (``YOLO.save``,
float16), read back with Ultralytics and run in eval mode on a fixed input. Written to
``tests/models/fixtures/``:

- ``ultralytics-<task>.pt``: the checkpoint;
- ``ultralytics-<task>.eval.pt``: ``{"images": (2, 3, 64, 96) uint8, <lucid-yolo output key>:
  tensor, …, "decoded": the reference's end-to-end detections}`` (a plain tensor dict); the
  network input is ``images / 255``;
- ``ultralytics-detect-trained.pt``: the detector at the same scale trained by Ultralytics'
  trainer for one epoch on a 4-image synthetic set (5 classes, 64 px) and saved by it mid-run
  (``save_period=1``): EMA, optimizer state, training arguments and results, as a user's
  ``last.pt`` holds them before the trainer strips it.

The eval outputs hold the bits of the CPU they were computed on: its vector unit picks the
kernels, and another CPU's round differently in the last bit (an AVX2 machine against the one the
first set was recorded on, 2026-12-01). ``--outputs-for NAME`` leaves the checkpoints and images
as they are and writes the reference's outputs of this CPU beside the others, as
``ultralytics-<task>.eval.<NAME>.pt``; the importer test takes whichever recorded set its own
outputs match, bit for bit.

Ultralytics is a test peer, not a dependency: run this with it on the path after the workspace's
own packages (the trained fixture needs ``lucid_yolo.train``, and so Lightning, for its synthetic
set), e.g. with a scratch venv that has it::

    PEER=/tmp/ulvenv/lib/python3.11/site-packages
    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tools:$PEER .venv/bin/python \\
        tools/make_ultralytics_fixture.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from ultralytics_peer import build_reference, load_reference, perturb_statistics, reference_outputs

FIXTURE_SCALE = [0.5, 0.0625, 256]
"""``[depth, width, max_channels]`` of the fixtures."""

FIXTURES = {
    "detect": {"num_classes": 3},
    "segment": {"num_classes": 2, "num_masks": 8},
    "pose": {"num_classes": 1, "kpt_shape": (4, 3)},
    "obb": {"num_classes": 2},
}
IMAGE_SHAPE = (2, 3, 64, 96)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tests/models/fixtures"))
    parser.add_argument(
        "--outputs-for",
        metavar="NAME",
        help="only the eval outputs of the existing checkpoints on this CPU, as .eval.NAME.pt",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # CPU kernels split their reductions by the intra-op thread count, so outputs are bitwise
    # reproducible only at a fixed count; the importer test runs under one thread as well.
    torch.set_num_threads(1)
    if args.outputs_for:
        write_outputs_for(args.out, args.outputs_for)
        return
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, IMAGE_SHAPE, dtype=torch.uint8, generator=generator)
    for task, options in FIXTURES.items():
        wrapper = build_reference(task, "n", scale_override=FIXTURE_SCALE, **options)  # type: ignore[arg-type]
        perturb_statistics(wrapper)
        checkpoint = args.out / f"ultralytics-{task}.pt"
        wrapper.save(checkpoint)
        outputs = reference_outputs(load_reference(checkpoint), images.float() / 255)
        torch.save({"images": images, **outputs}, args.out / f"ultralytics-{task}.eval.pt")
        print(f"{checkpoint}: {checkpoint.stat().st_size / 1e6:.2f} MB")
    trained = write_trained(args.out / "ultralytics-detect-trained.pt")
    print(f"{trained}: {trained.stat().st_size / 1e6:.2f} MB")


def write_outputs_for(folder: Path, name: str) -> None:
    """The reference's eval outputs of each task's existing checkpoint and images on this CPU."""
    for task in FIXTURES:
        images = torch.load(folder / f"ultralytics-{task}.eval.pt")["images"]
        outputs = reference_outputs(
            load_reference(folder / f"ultralytics-{task}.pt"), images.float() / 255
        )
        path = folder / f"ultralytics-{task}.eval.{name}.pt"
        torch.save({"images": images, **outputs}, path)
        print(f"{path}: {path.stat().st_size / 1e3:.1f} kB")


def write_trained(path: Path) -> Path:
    """The fixture-scale detector after one epoch of Ultralytics' trainer, as it saved it."""
    import yaml
    from ultralytics import YOLO
    from ultralytics.nn.tasks import yaml_model_load

    from lucid_yolo.train.data.synthetic import generate_synthetic

    with tempfile.TemporaryDirectory() as scratch:
        data = generate_synthetic(
            Path(scratch, "data"), task="detect", num_train=4, num_val=2, imgsz=64, seed=0
        )
        # The trainer builds its network from the model's YAML file, scale from the file name.
        config = yaml_model_load("yolo26n.yaml")
        config["scales"] = {"n": FIXTURE_SCALE}
        model_file = Path(scratch, "yolo26n-fixture.yaml")
        model_file.write_text(yaml.safe_dump(config))
        YOLO(str(model_file)).train(
            data=str(data),
            epochs=1,
            imgsz=64,
            batch=2,
            device="cpu",
            workers=0,
            project=scratch,
            name="train",
            plots=False,
            save_period=1,
            seed=0,
        )
        shutil.copyfile(Path(scratch, "train", "weights", "epoch0.pt"), path)
    return path


if __name__ == "__main__":
    main()
