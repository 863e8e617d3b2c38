"""`qtts score`: model-based scores of a qtts out dir or any AudioFolder, as a separate pass.

DNSMOS P.835 (speech, background and overall quality), an ASR round trip (CER, WER against
the row's text) and speaker similarity (against the row's reference clip and its voice's mean),
written to PATH/scores.parquet and resumed per row by each scorer's identity; and what
`qtts results` says of a dataset's quality, with the dataset card (which every finished run
writes too).
Needs the `quality` extra. May import the jobs layer's public functions (out dirs, results,
atomic writes), the model layer and errors; the CLI imports it. No synthesis, no engine.
"""
