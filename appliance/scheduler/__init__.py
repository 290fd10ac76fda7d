"""Queue order, gang admission on a snapshot, pending reasons; and the loop that applies them."""
