"""The DaemonSet controller's pure core: placement, and the rest of syncDaemonSet as it lands."""
