"""Typer command-line interface: parse, call core, map errors to exit codes."""
