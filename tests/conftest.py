import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_global_rngs() -> None:
    """Tests that draw from the global RNGs see the same numbers whatever ran before them."""
    torch.manual_seed(0)
    np.random.seed(0)
