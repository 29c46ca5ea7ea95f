"""GPU memory of a recording: what a recorder holds beyond the graphs' pool, and its peak.

Run on a CUDA machine: ``python -m pytest -m gpu tests/replay/test_gpu_memory.py``. The bounds
are ratios of allocated bytes measured in the same process, never times.
"""

from __future__ import annotations

import pytest
import torch
from replay_nets import recorded_small_net, side_stream_segments
from torch import Tensor, nn

from lucid_yolo.replay import ModuleRegion, RegionRecorder, ReplayPool

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("deterministic")]


class DeepNet(nn.Module):
    """Convolutions whose activations dwarf their backward's scratch and their parameters."""

    def __init__(self, channels: int = 32, depth: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.body = nn.Sequential(
            *(
                nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.SiLU())
                for _ in range(depth)
            )
        )
        self.head = nn.Conv2d(channels, 4, 1)

    def forward(self, x: Tensor) -> Tensor:
        head: Tensor = self.head(self.body(self.stem(x)))
        return head


def _step_peak(recorder: RegionRecorder, x: Tensor) -> int:
    """Peak allocated bytes of one forward+backward above what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    recorder(x).square().mean().backward()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def test_gpu_recording_peak_holds_one_pass_of_activations() -> None:
    """The warm-up frees each pass before the next forward: the recording step (warm-up,
    capture into the pool, replay) peaks near a native step, not near two passes of
    activations (about 1.8x a native step for this net when two passes were alive at once)."""
    torch.manual_seed(0)
    net = DeepNet().cuda()
    recorder = RegionRecorder(ModuleRegion(net), pool=ReplayPool("cuda"), capture_warmup=3)
    x = torch.randn(8, 3, 128, 128, device="cuda")
    native = _step_peak(recorder, x)
    net.zero_grad(set_to_none=True)
    recording = _step_peak(recorder, x)
    assert recorder.telemetry.recordings == 1
    assert recording < 1.4 * native, (recording, native)


def test_gpu_recording_leaves_no_live_block_on_the_side_stream() -> None:
    """Buffers a recording keeps outside the pool (the static gradient outputs) sit on the
    caller's stream: a live block on the side stream would pin its whole segment there, where
    no default-stream work can reuse the rest."""
    recorder, pool = recorded_small_net("cuda")
    torch.cuda.synchronize()
    assert recorder.telemetry.recordings == 1
    live_side_segments = [
        (s["total_size"], s["allocated_size"])
        for s in side_stream_segments(pool)
        if s["allocated_size"] > 0
    ]
    assert live_side_segments == []
