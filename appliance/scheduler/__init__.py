"""Queue order, gang admission on a snapshot, pending reasons: pure decisions, no I/O (the
loop that applies them is appliance.loops.scheduling)."""
