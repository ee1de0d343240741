import pytest
import torch

from lmlab.objectives import SpecialTokens
from tests.ray_cluster import ray_address  # noqa: F401 — a local Ray cluster, for any test


@pytest.fixture
def special() -> SpecialTokens:
    return SpecialTokens.layout(vocab_size=200, n_sentinels=20)


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_block(special: SpecialTokens, rows: int, length: int, seed: int = 0) -> torch.Tensor:
    """Ordinary tokens only (ids above every special id)."""
    first = max(special.all_ids) + 1
    return torch.randint(first, special.vocab_size, (rows, length), generator=seeded(seed))


def assert_close_in_bf16(got: torch.Tensor, expected: torch.Tensor) -> None:
    """`got` within four bf16 roundings (2⁻⁸ each) of the largest value of `expected`: what
    two bf16 computations of one attention, forward or backward, differ by (up to 3.4 seen)."""
    bound = 4 * 2**-8 * expected.float().abs().max().item()
    torch.testing.assert_close(got.float(), expected.float(), atol=bound, rtol=0)
