"""stepping.start_positions: where a starting reconciler resumes, and which positions its first commit records."""

from __future__ import annotations

import pytest

from reconciler.core.stepping import CLUSTER_PARTITION, start_positions


@pytest.mark.parametrize(("decided", "positions", "consistent", "alone", "start", "new"), [
    # alone, nothing committed: the whole history, and every partition gets a position with the first commit
    (range(3), {}, 40, True, 1, {}),
    # alone, every partition committed: after the lowest (the cluster partition's included)
    (range(2), {0: 90, 1: 70, CLUSTER_PARTITION: 60}, 100, True, 61, {}),
    # alone, a partition that never had an event: no later than the bootstrap, recorded there
    (range(3), {0: 90, 1: 70}, 100, True, 71, {2: 70}),
    # split, a fresh set: after what the bootstrap reflects, recorded for every partition
    ([1, 3], {}, 40, False, 41, {1: 40, 3: 40}),
    # split, a taken-over partition whose owner committed state but never a position for it (issue 12)
    ([0, 1], {1: 152}, 159, False, 153, {0: 152}),
    # split, positions past what the bootstrap reflects (the state's copy lagged): no later than the bootstrap
    ([0, 1], {1: 170}, 159, False, 160, {0: 159}),
    # alone, every partition committed past what the bootstrap reflects (the state's copy lagged): from the
    # bootstrap on, so that the events between it and the positions reach the cache (stepping.select's catch_up)
    (range(2), {0: 90, 1: 95, CLUSTER_PARTITION: 92}, 80, True, 81, {}),
    # split, likewise
    ([0, 1], {0: 170, 1: 175}, 159, False, 160, {}),
    # split, every partition committed: after the lowest, nothing to record
    ([0, 1], {0: 12, 1: 30}, 40, False, 13, {}),
    # split, an empty history: from the first event, and recorded there (its commits may be of the cluster
    # partition only, whose position a split start leaves out)
    ([0], {}, 0, False, 1, {0: 0}),
    ([1, 3], {}, 0, False, 1, {1: 0, 3: 0}),
    # alone, an empty history: from the first event; every later commit's positions bound the next start
    (range(2), {}, 0, True, 1, {}),
])
def test_start_positions(decided: range | list[int], positions: dict[int, int], consistent: int, alone: bool,
                         start: int, new: dict[int, int]) -> None:
    assert start_positions(decided, positions, consistent, alone=alone) == (start, new)
