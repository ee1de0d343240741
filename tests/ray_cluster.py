"""A Ray cluster on this machine, for the tests of what runs on one: a head node that runs no
tasks and two worker nodes of one CPU each, so that tasks land on separate nodes (raylets) as
they would on a real cluster. Ray's own test cluster (ray.cluster_utils.Cluster) starts it
once per test session and stops the processes it started, and only those (`ray stop` would
stop every Ray instance of the machine's user).

tests/conftest.py offers the fixture to every test: take `ray_address` (the head's address,
for RAY_ADDRESS or ray.init) as an argument."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

WORKER_NODES = 2


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory) -> Iterator[str]:
    Cluster = pytest.importorskip("ray.cluster_utils").Cluster
    from ray._private.utils import get_ray_address_file

    # Ray records the newest cluster's address in its default temporary folder (/tmp/ray), which
    # only a node started without temp_dir makes: on a fresh machine it is not there yet.
    Path(get_ray_address_file(None)).parent.mkdir(parents=True, exist_ok=True)
    # The machine's own address, not 127.0.0.1: a driver rewrites a loopback address to it.
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False,
        "temp_dir": str(tmp_path_factory.mktemp("ray"))})
    try:
        for _ in range(WORKER_NODES):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()
