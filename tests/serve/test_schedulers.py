"""The image role's schedulers (loam.serve.schedulers) against diffusers' own EulerDiscreteScheduler and DDIMScheduler.

scripts/record_image_oracle.py recorded diffusers' plans under the tiny diffusion package's settings, with each
timestep spacing and several step counts: the timesteps exactly, the noise levels and cumulative alphas within
float32 rounding (diffusers computes its betas in torch's float32 linspace, Loam in float64 cast to float32).
The steps themselves are held to diffusers through the images in test_images.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from loam.serve.schedulers import SchedulerConfig, make_schedule
from loam.serve.spec import PackageError

ORACLE = Path(__file__).parent / "image_oracle.npz"
PACKAGE = Path(__file__).parent / "packages" / "tiny_diffusion"
RTOL = 1e-5
"""Float32 rounding of values computed in another order: the smallest sigmas, of the first training timesteps, differ
by up to 3.4e-6 relative, where 1 - alpha cancels most of alpha's digits; a one-off timestep moves a sigma by 1e-3
relative or more."""


def plans() -> list[str]:
    with np.load(ORACLE) as data:
        return sorted({".".join(key.split(".")[:3]) for key in data.files if key.startswith("schedule.")})


@pytest.mark.parametrize("plan", plans())
def test_the_plans_are_diffusers(plan: str) -> None:
    _, spacing, steps = plan.split(".")
    raw = json.loads((PACKAGE / "model.json").read_text(encoding="utf-8"))["scheduler"]
    config = dataclasses.replace(SchedulerConfig.read(raw, "model.json"), timestep_spacing=spacing)
    with np.load(ORACLE) as data:
        euler = make_schedule(config, "euler", int(steps))
        assert np.array_equal(euler.timesteps, data[f"{plan}.euler.timesteps"])
        np.testing.assert_allclose(euler.sigmas, data[f"{plan}.euler.sigmas"], rtol=RTOL, atol=0)
        np.testing.assert_allclose(euler.init_noise_sigma, data[f"{plan}.euler.init_noise_sigma"][0], rtol=RTOL)
        ddim = make_schedule(config, "ddim", int(steps))
        assert np.array_equal(ddim.timesteps, data[f"{plan}.ddim.timesteps"])
        np.testing.assert_allclose(ddim.alphas, data[f"{plan}.ddim.alphas"], rtol=RTOL, atol=0)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"beta_schedule": "cosine"}, "scheduler.beta_schedule"),
        ({"default": "pndm"}, "scheduler.default"),
        ({"steps_offset": "1"}, "scheduler.steps_offset"),
        ({"eta": 0.5}, "scheduler.eta"),
    ],
)
def test_a_wrong_scheduler_key_is_named(raw: dict[str, object], key: str) -> None:
    with pytest.raises(PackageError, match=rf"key '{key}'"):
        SchedulerConfig.read(raw, "model.json")
