"""What a run must do: fingerprints, the resume scan and its rules, shards, frame budgets, token
lengths and chunks."""
