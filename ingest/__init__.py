"""list+watch -> ObservedEvents -> JetStream, once per event, in order per object.

    config.py       IngestConfig, what `kubus ingest` / `kubus up` fill in
    service.py      Ingest / run_ingest: the process, its counters, checkpoint writing, shutdown
    watching.py     KindWatcher: one kind's list, watch, 410 relist and reconnect loop
    transport.py    the official client, off the loop: lists in worker threads, a thread per watch
    observing.py    raw API bytes -> ObservedEvent, or QUARANTINED with the field at fault (pure)
    relisting.py    what a relist must publish (pure) and reading what the bus already knows
    publishing.py   OrderedPublisher: pipelined publish_async, per-object order, in-order resends
    checkpoints.py  the Checkpoints port: memory and NATS KV adapters
    kinds.py        the watched kinds, their models and list calls
"""
