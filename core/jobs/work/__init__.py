"""What a run must do: fingerprints, the resume scan and its rules, frame budgets and the segment
limit, token lengths and chunks."""
