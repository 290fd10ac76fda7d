"""`appliance simulate`: the real scheduler and store over a simulated cluster, on a
virtual clock."""
