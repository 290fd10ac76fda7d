"""A job's data set, read by its input workers: the built-in data processors and the order of
the samples (see dataset.py and order.py)."""
