"""The executor: applies the reconciler's actions to the Kubernetes API, once each, and reports results.

    config.py       ExecutorConfig: where NATS and the API are, how hard to push
    service.py      run_executor(config): the service, wired
    consuming.py    the JetStream shell: pull, apply, publish results, ack / NAK / dead-letter
    applying.py     what each action means in API calls, and what each answer means
    ownership.py    defence in depth: a create whose objects are not its controller's is refused (NotOwned)
    creating.py     CreatePods: slow-start batches, idempotent creates
    delivery.py     Delivery: one delivery of one action, and how its results are reported
    effects.py      Effect: one outcome of applying an action
    events.py       Events as upstream records them: pod create/delete events, written as client-go does
    correlating.py  client-go's EventCorrelator: aggregation, counting, the spam filter (pure)
    kubeapi.py      API calls over runtime/kubehttp.py (HTTP/1.1 keep-alive connections on the loop): rate limited
                    (kube.flowcontrol's token bucket), retried as client-go, pre-encoded bodies
    errors.py       which answers are final, retried, or leave the outcome unknown; Status decoding
    resources.py    REST paths of the kinds actions touch
    metrics.py      counters for /metrics

API errors surface as upstream's do. An answer from the API is final unless client-go's rest client
would resend the request: a 429 or 5xx carrying Retry-After is sent again after that wait, at most 10
times (client-go's maxRetries), and its last answer is final. Every final error, a 500 without
Retry-After as much as a 403 or a 422, becomes a failed result at once (and a FailedCreate or
FailedDelete event), so the reconciler lowers its expectations, reports ReplicaFailure and retries
with its rate limiter, as upstream's controllers do with the error from podControl. Only an unknown
outcome (no answer, or a 504) is retried by the executor: with backoff within the delivery, then by
redelivery, idempotently (a create meets its own pod through its idempotency key, a delete its uid
precondition), and reported failed on the last delivery. See executor/errors.py.
"""
