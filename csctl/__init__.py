"""csctl: the appliance's command line (see `csctl --help`)."""
