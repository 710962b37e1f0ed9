"""The sim freezes the survivors of full collections, as the reconciler does (runtime/collecting.py; issue 25)."""

from __future__ import annotations

import gc

from runtime import collecting
from sim import resources as R
from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate


async def test_the_sims_start_installs_the_collectors_policy() -> None:
    was_installed = collecting._installed is not None
    collecting.uninstall()  # so that only the sim's start can install it here
    cluster = SimCluster(SimConfig(nodes=generate(3), seed=1))
    try:
        await cluster.start()
        policy = collecting._installed
        assert policy is not None and gc.callbacks.count(policy) == 1
        gc.collect()
        assert policy.full_collections >= 1 and gc.get_freeze_count() > 0  # the survivors, the sim's nodes among them
        # the sim answers as before: its objects are only out of the collector's sight
        assert cluster.store.count(R.NODES) == 3
        assert cluster.registry.get(R.NODES, "", "node-1").obj["metadata"]["name"] == "node-1"
    finally:
        await cluster.stop()
        collecting.uninstall()
        if was_installed:
            collecting.install()
