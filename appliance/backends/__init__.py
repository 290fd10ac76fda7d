"""Where replicas run: the Backend protocol and its implementations."""
