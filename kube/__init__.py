"""The Kubernetes object model and its pure helpers; no I/O anywhere in this package.

Model: ``meta`` (ObjectMeta, selectors, List, WatchEvent, Status), ``core``
(Node, Pod, Event), ``apps`` (DaemonSet, ReplicaSet, ControllerRevision),
``template`` (the lossless PodTemplateSpec); ``codec`` turns JSON into them and
back, ``times`` handles timestamps.

Helpers: ``labels`` (+ ``selection``, ``selectorparser``), ``fields``,
``validation``, ``nodeaffinity``, ``taints``, ``pods``, ``intstr``,
``ownership`` (+ ``gojson``), ``features`` (the feature gates decisions depend on),
``flowcontrol`` (client-go's doubling backoff and token bucket).
Test builders: ``testing``.
"""
