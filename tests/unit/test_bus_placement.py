"""runtime.bus.peers_catching_up: a stream's placement that failed only because a peer is offline to the meta leader
(a cluster just started, a server restarting) is waited for by ensure_streams; any other reason is refused at once.
Found by CI: `kubus reconcile --stream-replicas 3` right after a 3-node cluster's start exited with "no suitable
peers for placement, peer offline"."""

from __future__ import annotations

import pytest
from nats.js.errors import APIError

from runtime.bus import peers_catching_up


@pytest.mark.parametrize(("err_code", "description", "transient"), [
    (10005, "no suitable peers for placement, peer offline", True),
    (10005, "no suitable peers for placement, peer offline, peer offline", True),
    (10005, "no suitable peers for placement, insufficient storage", False),
    (10005, "no suitable peers for placement, peer offline, insufficient storage", False),
    (10005, "no suitable peers for placement", False),
    (10023, "insufficient resources", False),
    (10058, "stream name already in use with a different configuration", False),
])
def test_only_offline_peers_are_waited_for(err_code: int, description: str, transient: bool) -> None:
    assert peers_catching_up(APIError(code=500, err_code=err_code, description=description)) is transient
