"""Long rows cut into segment requests at sentence and clause edges, and joined back."""
