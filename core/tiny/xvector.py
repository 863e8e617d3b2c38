"""A tiny random x-vector speaker model (transformers' WavLMForXVector), built offline, for
`qtts score --speaker-model DIR` in tests and to try the path without a download.

Owns the checkpoint directory: config, random weights and the feature extractor (what
AutoFeatureExtractor and AutoModelForAudioXVector load). Its weights are random, so its
embeddings say nothing about who speaks: it proves the plumbing, never accuracy.
Must not know: jobs, scoring.
"""

from __future__ import annotations

from pathlib import Path


def make_tiny_xvector(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the checkpoint into out_dir (created) and return it."""
    import torch
    from transformers import Wav2Vec2FeatureExtractor, WavLMConfig, WavLMForXVector

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = WavLMConfig(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        conv_dim=(8,) * 7,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        num_buckets=32,
        max_bucket_distance=64,
        tdnn_dim=(8, 8),
        tdnn_kernel=(3, 1),
        tdnn_dilation=(1, 1),
        xvector_output_dim=8,
        num_labels=2,
    )
    torch.manual_seed(seed)
    WavLMForXVector(config).eval().save_pretrained(out)
    Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=16_000, do_normalize=True, return_attention_mask=True
    ).save_pretrained(out)
    return out
