"""Diffusion schedulers in numpy: the timesteps, noise levels and update of one denoising step.

The image role (`loam.serve.image`) denoises each request's latents step by step; the scheduler says at
which timestep each step runs the UNet, how the latents are scaled before it, and how the UNet's noise
prediction moves the latents to the next step.  Two are given, each computing exactly what diffusers'
scheduler of the same name computes for the same configuration (`SchedulerConfig`, the package's
`scheduler` key, named as diffusers' `scheduler_config.json` names them):

- `euler`: diffusers' `EulerDiscreteScheduler` (no churn: `s_churn` 0, as its pipelines call it);
- `ddim`: diffusers' `DDIMScheduler` with `eta` 0 (deterministic, as its pipelines call it).

A `Schedule` is one request's plan for its number of steps; it holds no latents, so one schedule serves
every request with that scheduler and step count.  The noise levels are computed as diffusers computes
them (its betas and their cumulative products in float32, its sigmas interpolated in float64), so the
same initial latents give the same image within float32 rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from loam.serve.spec import PackageError

SCHEDULERS = ("euler", "ddim")
BETA_SCHEDULES = ("linear", "scaled_linear")
SPACINGS = ("leading", "trailing", "linspace")


@dataclass(frozen=True)
class SchedulerConfig:
    """The training noise schedule and how inference steps are spaced over it (diffusers' config keys)."""

    default: str = "euler"
    num_train_timesteps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: str = "scaled_linear"
    timestep_spacing: str = "leading"
    steps_offset: int = 1
    set_alpha_to_one: bool = False

    @staticmethod
    def read(raw: object, where: str) -> SchedulerConfig:
        """The package's `scheduler` key (absent: Stable Diffusion 1.x's values); a PackageError names the key."""
        if raw is None:
            return SchedulerConfig()
        if not isinstance(raw, Mapping):
            raise PackageError(f"{where}: key 'scheduler' must be an object of diffusers scheduler settings")
        fields = SchedulerConfig.__dataclass_fields__
        values: dict[str, object] = {}
        for key, value in raw.items():
            if key not in fields:
                raise PackageError(f"{where}: key 'scheduler.{key}' is unknown (known: {', '.join(fields)})")
            want = type(getattr(SchedulerConfig(), key))
            if want is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise PackageError(f"{where}: key 'scheduler.{key}' must be {want.__name__}, got {value!r}")
            values[key] = value
        config = SchedulerConfig(**values)  # type: ignore[arg-type]  # each value's type checked against its field
        for key, allowed in (
            ("default", SCHEDULERS),
            ("beta_schedule", BETA_SCHEDULES),
            ("timestep_spacing", SPACINGS),
        ):
            if getattr(config, key) not in allowed:
                raise PackageError(f"{where}: key 'scheduler.{key}' must be one of {', '.join(allowed)}")
        if config.num_train_timesteps < 2 or not 0 < config.beta_start < config.beta_end < 1:
            raise PackageError(
                f"{where}: key 'scheduler' needs num_train_timesteps >= 2, 0 < beta_start < beta_end < 1"
            )
        return config

    def alphas_cumprod(self) -> np.ndarray:
        """The cumulative products of 1 - beta over the training timesteps, in float32 as diffusers keeps them."""
        n = self.num_train_timesteps
        if self.beta_schedule == "linear":
            betas = np.linspace(self.beta_start, self.beta_end, n, dtype=np.float64).astype(np.float32)
        else:
            betas = (np.linspace(self.beta_start**0.5, self.beta_end**0.5, n, dtype=np.float64) ** 2).astype(np.float32)
        return np.cumprod((np.float32(1.0) - betas).astype(np.float32), dtype=np.float32)

    def timesteps(self, steps: int) -> np.ndarray:
        """The training timesteps the `steps` inference steps run at, first (noisiest) first, as float64."""
        n = self.num_train_timesteps
        if self.timestep_spacing == "linspace":
            return np.linspace(0, n - 1, steps, dtype=np.float64)[::-1].copy()
        if self.timestep_spacing == "leading":
            ratio = n // steps
            return (np.arange(0, steps) * ratio).round()[::-1].astype(np.float64) + self.steps_offset
        ratio_f = n / steps
        return np.arange(n, 0, -ratio_f).round().astype(np.float64) - 1


@dataclass(frozen=True)
class Schedule:
    """One scheduler's plan for a number of steps: the timestep of each step and the update it makes."""

    name: str
    steps: int
    timesteps: np.ndarray  # float32, one per step: what the UNet is given
    init_noise_sigma: float  # the initial latents are standard normal times this
    sigmas: np.ndarray  # euler: the noise level of each step, and 0 after the last
    alphas: np.ndarray  # ddim: [steps, 2]: the cumulative alpha at each step's timestep and at the one it steps to

    def scale_input(self, latents: np.ndarray, step: int) -> np.ndarray:
        """The latents as the UNet reads them at `step`."""
        if self.name == "euler":
            return (latents / np.float32((float(self.sigmas[step]) ** 2 + 1) ** 0.5)).astype(np.float32)
        return latents

    def step(self, noise: np.ndarray, step: int, latents: np.ndarray) -> np.ndarray:
        """The latents after `step`, given the UNet's (guided) noise prediction at it."""
        if self.name == "euler":
            sigma, following = self.sigmas[step], self.sigmas[step + 1]
            # diffusers: x0 = x - sigma * eps; derivative (x - x0) / sigma; x + derivative * (sigma' - sigma)
            original = latents - sigma * noise
            derivative = (latents - original) / sigma
            return (latents + derivative * (following - sigma)).astype(np.float32)
        alpha, alpha_prev = self.alphas[step]
        original = (latents - (np.float32(1) - alpha) ** np.float32(0.5) * noise) / alpha ** np.float32(0.5)
        direction = (np.float32(1) - alpha_prev) ** np.float32(0.5) * noise
        return (alpha_prev ** np.float32(0.5) * original + direction).astype(np.float32)


def make_schedule(config: SchedulerConfig, name: str, steps: int) -> Schedule:
    """The plan of scheduler `name` for `steps` steps under `config`."""
    alphas_cumprod = config.alphas_cumprod()
    timesteps = config.timesteps(steps)
    if name == "euler":
        # float32 noise levels of the training timesteps, interpolated (in float64) at the inference ones
        levels = (((np.float32(1) - alphas_cumprod) / alphas_cumprod) ** np.float32(0.5)).astype(np.float32)
        sigmas = np.interp(timesteps.astype(np.float32), np.arange(0, len(levels)), levels)
        sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
        top = float(sigmas.max())
        init = top if config.timestep_spacing in ("linspace", "trailing") else (top**2 + 1) ** 0.5
        return Schedule(name, steps, timesteps.astype(np.float32), init, sigmas, np.zeros(0, np.float32))
    # ddim: integer timesteps; step i moves from timestep t_i to t_i - num_train_timesteps // steps
    ints = timesteps.round().astype(np.int64)  # linspace's are rounded (leading and trailing are whole already)
    final = np.float32(1.0) if config.set_alpha_to_one else alphas_cumprod[0]
    previous = ints - config.num_train_timesteps // steps
    alphas = np.array(
        [(alphas_cumprod[t], alphas_cumprod[p] if p >= 0 else final) for t, p in zip(ints, previous, strict=True)],
        dtype=np.float32,
    )
    return Schedule(name, steps, ints.astype(np.float32), 1.0, np.zeros(0, np.float32), alphas)
