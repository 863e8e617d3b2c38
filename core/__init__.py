"""Model, prompts, generation engine, manifests and output writing."""
