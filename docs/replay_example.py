"""A plain PyTorch training loop whose whole step replays from CUDA graphs (CPU: stand-in).

Run it with ``uv run python docs/replay_example.py``; the "Replay library" docs page includes
this file and a test runs it.
"""

import torch
from torch import Tensor, nn

from lucid_yolo.replay import ModelEMA, ReplayStep

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

net = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.SiLU(),
    nn.Conv2d(16, 4, 1),
).to(device)


def criterion(outputs: Tensor, target: Tensor) -> Tensor:
    """Native loss code after the replayed network: any PyTorch ops."""
    return nn.functional.smooth_l1_loss(outputs, target)


# The learning rate is a device tensor so the replayed update reads it at every launch;
# fused SGD accepts a tensor LR without a host sync.
lr = torch.tensor(0.05, device=device)
optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, fused=device == "cuda")
step = ReplayStep(
    net,
    criterion,
    optimizer,
    accumulation=2,
    ema=ModelEMA(net, decay=0.99, tau=10.0),
    graph_update=device == "cuda",
    verify_every=4,
)
for iteration in range(12):
    images = torch.randn(8, 3, 32, 32, device=device)
    targets = torch.randn(8, 4, 32, 32, device=device)
    loss = step(images, targets)
    lr.fill_(0.05 * (1 - iteration / 12))

print(f"last loss {loss.item():.4f}")
print(step.telemetry.as_dict())
if device == "cpu":
    print(
        "no CUDA device: nothing was graphed; the counters above are the CPU stand-in's, "
        "which runs every step eagerly through the same bookkeeping"
    )
