"""The model as published: config dataclasses (torch-free, read by the jobs layer too), the plain
eager PyTorch talker, code predictor, speech-tokenizer decoder and speaker encoder, and strict
loading from a local or Hugging Face checkpoint. Knows tensors and token ids; no speed tricks (those
live in qtts.core.engine), no text layout, no jobs."""
