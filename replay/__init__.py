"""`kubus replay`: the controllers re-run over a recorded history (docs/replay.md)."""
