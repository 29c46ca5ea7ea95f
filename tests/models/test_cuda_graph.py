"""The training forward+backward of every task's nano model is graph-safe: one CUDA graph,
replayed, gives bitwise the outputs, gradients and BatchNorm buffers of eager execution.

Run on a CUDA machine with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (``make test-gpu`` sets it):
``python -m pytest -m gpu tests/models/test_cuda_graph.py``.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lucid_yolo.models import TASKS, YOLO26, create_model
from lucid_yolo.models.registry import TASK_SUFFIXES

pytestmark = pytest.mark.gpu


def step(model: YOLO26, images: Tensor) -> dict[str, Tensor]:
    """Forward under bf16 autocast (no cast cache: capture needs that) and backward of a loss
    that reads every output."""
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        result = model(images)
        loss = torch.stack([t.float().square().mean() for t in result.values()]).sum()
    loss.backward()
    return result


def restore(model: YOLO26, state: dict[str, Tensor]) -> None:
    """Put parameters and buffers back in place (addresses kept) and drop the gradients."""
    with torch.no_grad():
        for key, tensor in model.state_dict().items():
            tensor.copy_(state[key])
    for parameter in model.parameters():
        parameter.grad = None


def bits(tensor: Tensor) -> Tensor:
    return tensor.detach().reshape(-1).contiguous().view(torch.uint8)


@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize("task", TASKS)
def test_cuda_graph_replay_matches_eager_bitwise(task: str) -> None:
    model = create_model(f"yolo26n{TASK_SUFFIXES[task]}", num_classes=3).cuda().train()
    generator = torch.Generator(device="cuda").manual_seed(0)
    static_images = torch.rand(2, 3, 128, 128, device="cuda", generator=generator)
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    eager_out = {k: v.detach().clone() for k, v in step(model, static_images).items()}
    eager_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    eager_state = {k: v.clone() for k, v in model.state_dict().items()}

    # warm up on a side stream (lazy cuDNN/cuBLAS init, every conv shape seen), then undo it
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            restore(model, initial)
            step(model, static_images)
    torch.cuda.current_stream().wait_stream(side)
    restore(model, initial)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step(model, static_images)
    # the gradients were allocated inside the capture: the replay fills these very tensors
    static_grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        for key, tensor in model.state_dict().items():
            tensor.copy_(initial[key])  # capture runs nothing; make the starting point explicit
    graph.replay()
    torch.cuda.synchronize()

    assert static_out.keys() == eager_out.keys()
    for key, tensor in eager_out.items():
        assert torch.equal(bits(static_out[key]), bits(tensor)), f"output {key} differs"
    assert static_grads.keys() == eager_grads.keys()
    for name, grad in eager_grads.items():
        assert torch.equal(bits(static_grads[name]), bits(grad)), f"grad of {name} differs"
    static_state = model.state_dict()
    for key, tensor in eager_state.items():
        assert torch.equal(bits(static_state[key]), bits(tensor)), f"state {key} differs"
