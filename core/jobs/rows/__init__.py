"""The job's input rows: manifests and text files as Arrow columns, validated per row."""
