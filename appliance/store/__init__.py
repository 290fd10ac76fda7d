"""The SQL job store: tables, engine, migrations and JobStore, the only writer of job phase."""
