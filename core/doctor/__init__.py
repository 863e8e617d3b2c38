"""`qtts doctor`: prove an install on its device in one command. Each check runs the project's own
code (engine, graphs, kernels, bench) on random weights and answers ok, failed or skipped; the CLI
prints them. Knows devices and engines; no jobs, no files."""
