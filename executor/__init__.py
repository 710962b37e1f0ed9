"""The executor: applies the reconciler's actions to the Kubernetes API, once each, and reports results.

    config.py     ExecutorConfig: where NATS and the API are, how hard to push
    service.py    run_executor(config): the service, wired
    consuming.py  the JetStream shell: pull, apply, publish results, ack / NAK / dead-letter
    applying.py   what each action means in API calls, and what each answer means
    creating.py   CreatePods: slow-start batches, idempotent creates
    effects.py    Effect (one outcome) and Delivery (one delivery of one action)
    events.py     Events as upstream records them: pod create/delete events, the spam filter
    kubeapi.py    the official client on a thread pool: rate limited, retried, pre-encoded bodies
    errors.py     transient vs permanent, Status decoding, backoff
    ratelimit.py  the token bucket (QPS, burst)
    resources.py  REST paths of the kinds actions touch
    metrics.py    counters for /metrics
"""
