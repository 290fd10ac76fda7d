"""Loops that move jobs through phases from what the backend reports."""
