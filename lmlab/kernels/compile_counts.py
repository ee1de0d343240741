"""What torch.compile did in this process: graph breaks and graphs compiled, read from dynamo's
own counters. A compiled training step should trace into whole graphs once and then only run
them: every break hands control back to Python mid-step, and every graph compiled after the
first step is a recompilation (a shape or guard that changed)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileCounts:
    graph_breaks: int  # breaks traced, summed over their reasons
    graphs: int  # distinct graphs dynamo captured

    def since(self, earlier: CompileCounts) -> CompileCounts:
        return CompileCounts(self.graph_breaks - earlier.graph_breaks,
                             self.graphs - earlier.graphs)


def compile_counts() -> CompileCounts:
    """The counts so far in this process (since the last `reset_compile_counts`)."""
    from torch._dynamo.utils import counters

    return CompileCounts(sum(counters["graph_break"].values()),
                         counters["stats"]["unique_graphs"])


def reset_compile_counts() -> None:
    from torch._dynamo.utils import counters

    counters.clear()
