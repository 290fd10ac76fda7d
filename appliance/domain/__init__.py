"""Pure domain model: no I/O, no transport, no database."""
