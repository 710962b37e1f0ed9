"""One meaning per exit code, for every kubus command (the README's commands table says which each returns).

    0  done (a service: stopped when asked)
    1  failed while running: a part of a service died on its own (the rest stopped cleanly first), or a crash
    2  did not start: bad input (a flag, its variable, a file, a usage error), or a dependency missing or
       unreachable (NATS, the database, a nats-server for the embedded one, a port taken)
    3  ran, and the answer is no: `replay --diff` found a divergence, `audit` does not know the pod or controller
       asked about, `db current` finds the schema behind this kubus (run `kubus db upgrade`)
"""

from __future__ import annotations

DONE, FAILED, NOT_STARTED, NO = 0, 1, 2, 3
