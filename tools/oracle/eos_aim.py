"""Aim the talker's EOS row so chosen rows stop at chosen steps and the rest never stop.

Owns: capturing the talker's last-position hidden state and logits at every generation step
(a forward hook on codec_head), replaying the official greedy choice over codec ids 0..2047
(repetition penalty 1.05 over generated ids), and a small LP that finds one EOS row w with
    w . h[r, k_r] >= max_r(k_r) + margin   for each stopping row r at its step k_r,
    w . h[r, s]   <= max_r(s)   - margin   for every other reachable step (s >= 2).
Changing the EOS row cannot change anything before EOS wins, so the no-EOS trajectories stay
valid while we solve.

Must not know: how cases are stored, checkpoint layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EOS = 2150
AUDIO_VOCAB = 2048
MIN_NEW_TOKENS = 2  # hard-wired in the official generate: EOS blocked for steps 0 and 1
PENALTY = 1.05


@dataclass
class Trajectory:
    hidden: np.ndarray  # [steps, H] final-norm hidden at the last position
    best: np.ndarray  # [steps] max processed logit over ids 0..2047
    tokens: list[int]  # greedy c0 per step (replayed)


class StepRecorder:
    """Forward hook on talker.codec_head: one (hidden, logits) pair per talker forward call."""

    def __init__(self, codec_head):
        self.hidden: list = []
        self.logits: list = []
        self._handle = codec_head.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output):
        self.hidden.append(inputs[0][:, -1, :].detach().float().clone())  # [B, H]
        self.logits.append(output[:, -1, :].detach().float().clone())  # [B, V]

    def clear(self) -> None:
        self.hidden.clear()
        self.logits.clear()

    def remove(self) -> None:
        self._handle.remove()


def replay(hidden, logits, row: int = 0) -> Trajectory:
    """Replay greedy c0 for batch row `row` (EOS assumed never chosen)."""
    steps = len(logits)
    hs = np.stack([h[row].numpy() for h in hidden])  # [steps, H]
    best = np.zeros(steps)
    tokens: list[int] = []
    for s in range(steps):
        scores = logits[s][row, :AUDIO_VOCAB].numpy().astype(np.float64).copy()
        for t in set(tokens):
            v = scores[t]
            scores[t] = v / PENALTY if v > 0 else v * PENALTY
        tokens.append(int(scores.argmax()))
        best[s] = scores.max()
    return Trajectory(hidden=hs, best=best, tokens=tokens)


def _constraints(trajs: dict[str, Trajectory], plan: dict[str, int | None]):
    """Rows of A w + t <= b for the LP (variables w..., t)."""
    rows, rhs = [], []
    for name, traj in trajs.items():
        stop = plan.get(name)
        last = len(traj.best) - 1 if stop is None else stop
        for s in range(MIN_NEW_TOKENS, last + 1):
            h, m = traj.hidden[s], traj.best[s]
            if stop is not None and s == stop:
                rows.append(np.append(-h, 1.0))  # -(w.h) + t <= -m
                rhs.append(-m)
            else:
                rows.append(np.append(h, 1.0))  # w.h + t <= m
                rhs.append(m)
    return np.array(rows), np.array(rhs)


def solve_eos_row(
    trajs: dict[str, Trajectory], plan: dict[str, int | None], bound: float = 4.0
) -> tuple[np.ndarray, float]:
    """Max-margin EOS row for `plan` (row name -> stop step, or None = never stop)."""
    from scipy.optimize import linprog

    a_ub, b_ub = _constraints(trajs, plan)
    dim = a_ub.shape[1] - 1
    cost = np.zeros(dim + 1)
    cost[-1] = -1.0  # maximise the margin t
    bounds = [(-bound, bound)] * dim + [(None, 2.0)]
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if not res.success:
        raise ValueError(f"EOS LP failed: {res.message}")
    return res.x[:dim], float(res.x[-1])


def margins(trajs: dict[str, Trajectory], plan: dict[str, int | None], w: np.ndarray) -> float:
    """Smallest satisfied margin of `w` over all constraints (negative = plan violated)."""
    a_ub, b_ub = _constraints(trajs, plan)
    return float(np.min(b_ub - a_ub[:, :-1] @ w))
