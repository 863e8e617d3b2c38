"""Long rows cut into segment requests at sentence and clause edges, and the segments joined back
into one row."""
