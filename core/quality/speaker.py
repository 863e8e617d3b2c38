"""Speaker similarity as `qtts score` scores it: each row's clip embedded by the speaker model
(qtts.core.quality.speaker_models), and
- `speaker_sim`: the cosine between the row's embedding and its reference clip's (rows that have
  one: Base rows in an out dir, an AudioFolder's `ref_audio`); each reference is embedded once;
- `speaker_sim_centroid`: the cosine between the row's embedding and the mean of the unit
  embeddings of every row of its voice (the dataset's `voice`: qtts.core.quality.dataset), the
  row itself included (a voice of one row scores 1.0). Computed again over every row at the end
  of each pass that scores speakers, from the stored embeddings (qtts.core.quality.embeddings),
  so it follows the rows as they are; null for a row without a voice or an embedding.
A silent clip (peak under -80 dBFS) has no speaker: it fails alone with that reason, as does a
row whose reference cannot be read. Knows the scorer's columns and its store; the pass drives it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.model.hub import one_line
from qtts.core.quality.audio import Clip, read_clip
from qtts.core.quality.embeddings import EmbeddingStore
from qtts.core.quality.speaker_models import SpeakerModelChoice, load

COLUMNS = ("speaker_sim",)
CENTROID = "speaker_sim_centroid"
SILENCE_PEAK = 1e-4  # -80 dBFS: no voice to embed (the floor voice cloning refuses too)
RULE = "cos/centroid-with-self:v1"  # changing how either cosine is made rescores every row


def identity(model: SpeakerModelChoice) -> str:
    return f"speaker:{model.identity}:{RULE}"


class SpeakerScorer:
    """One pass's speaker scoring over a dataset: needs, score, flush, finish."""

    def __init__(self, model: SpeakerModelChoice, device: str, overwrite: bool) -> None:
        self.model, self.device, self.overwrite = model, device, overwrite
        self.identity = identity(model)
        self.store: EmbeddingStore | None = None
        self._key = "id"
        self._refs: dict[str, np.ndarray | str] = {}

    def needs(self, table: pa.Table, dataset) -> np.ndarray:
        """Rows without a stored embedding from this identity, or not scored by it."""
        from qtts.core.quality.scores import SCORER_COLUMNS

        self.store = EmbeddingStore(dataset.embeddings_dir, self.identity)
        self._key = dataset.key
        rows = dataset.rows
        stored = self.store.open(rows[self._key], rows["stamp"], fresh=self.overwrite)
        scored = pc.fill_null(pc.equal(table[SCORER_COLUMNS["speaker"]], self.identity), False)
        return ~(stored & scored.to_numpy(zero_copy_only=False))

    def load(self):
        embed = load(self.model, self.device)

        def score(clips: list[Clip], rows: pa.Table) -> list:
            vectors = embed([_voiced(c.audio) for c in clips])
            keys, stamps = rows[self._key].to_pylist(), rows["stamp"].to_pylist()
            out = []
            for vector, key, stamp, ref in zip(
                vectors, keys, stamps, rows["ref_audio"].to_pylist(), strict=True
            ):
                self.store.add(key, stamp, vector)
                out.append(self._against_reference(vector, ref, embed))
            return out

        return score

    def _against_reference(self, vector: np.ndarray, ref: str | None, embed):
        """(speaker_sim,), or the reference's one-line reason (a str: the row fails with it)."""
        if ref is None:
            return (None,)
        if ref not in self._refs:
            clip = read_clip(ref)
            try:
                if clip.audio is None:
                    raise ValueError(clip.error)
                self._refs[ref] = embed([_voiced(clip.audio)])[0]
            except Exception as exc:  # noqa: BLE001 -- the reference's fault, said once per row
                self._refs[ref] = f"reference {ref}: {one_line(exc)}"
        found = self._refs[ref]
        return found if isinstance(found, str) else (float(np.dot(vector, found)),)

    def flush(self) -> None:
        if self.store is not None:
            self.store.flush()

    def finish(self, table: pa.Table, dataset) -> pa.Table:
        """table with CENTROID recomputed for every row from the stored embeddings."""
        rows = dataset.rows
        have, vectors = self.store.matrix(rows[self._key], rows["stamp"])
        values = centroid_sims(vectors, rows["voice"], have)
        at = table.schema.get_field_index(CENTROID)
        return table.set_column(at, table.schema.field(CENTROID), pa.array(values, pa.float64()))


def _voiced(audio: np.ndarray) -> np.ndarray:
    if float(np.abs(audio).max()) <= SILENCE_PEAK:
        raise ValueError("silent clip: no voice to embed (peak below -80 dBFS)")
    return audio


def centroid_sims(vectors: np.ndarray, voices, have: np.ndarray) -> list[float | None]:
    """Each row's cosine to the normalized mean of its voice's unit vectors (rows with a vector
    and a voice); None for the others. vectors: float32 [rows, dims]."""
    voices = voices.combine_chunks() if isinstance(voices, pa.ChunkedArray) else voices
    use = have & pc.is_valid(voices).to_numpy(zero_copy_only=False)
    out: list[float | None] = [None] * len(have)
    if not use.any():
        return out
    picked = np.flatnonzero(use)
    codes = pc.dictionary_encode(voices.filter(pa.array(use))).indices.to_numpy()
    unit = vectors[picked] / np.linalg.norm(vectors[picked], axis=1, keepdims=True)
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    sums = np.add.reduceat(unit[order].astype(np.float64), starts, axis=0)  # [voices, dims]
    groups = codes[order][starts]
    means = np.zeros_like(sums)
    means[groups] = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    sims = np.einsum("ij,ij->i", unit.astype(np.float64), means[codes])
    for i, value in zip(picked, sims, strict=True):
        out[i] = float(value)
    return out
