"""qtts: batch text-to-speech with the Qwen3-TTS 12 Hz models."""

__version__ = "0.2.0"
