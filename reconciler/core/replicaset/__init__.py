"""The ReplicaSet controller's pure core: event handlers, syncReplicaSet and calculateStatus."""
