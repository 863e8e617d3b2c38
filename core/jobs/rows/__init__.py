"""The job's input rows: manifests and text files read as Arrow columns, validated per row, ids
checked."""
