"""Suite-wide test settings."""

from __future__ import annotations

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One intra-op thread per xdist worker: the workers already fill the cores, and torch's
    # default (one thread per core in every worker) oversubscribes them several times over.
    torch.set_num_threads(1)
