"""`qtts voice`: voice files made once and cloned by every row of a dataset (make: from a clip with
a Base checkpoint; design: from an instruction, a VoiceDesign sample cloned by a Base checkpoint).
The file format is qtts.core.model.voice_file; rows use voices through the jobs layer."""
