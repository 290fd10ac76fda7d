"""The loops that apply decisions: scheduling (admission's decisions onto the store and the
backend) and reconciling (what the backend reports onto job phases). They read the store and
drive the backend directly, and change phases only through services.context.Context; the pure
decisions live in appliance.scheduler."""
