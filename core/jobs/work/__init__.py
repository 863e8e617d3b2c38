"""What a run must do: fingerprints, the resume scan and its rules, budgets, chunks."""
