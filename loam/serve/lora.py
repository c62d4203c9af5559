"""LoRA adapters of an image model's UNet: registered with the package, chosen per request, merged per cohort.

A package names its adapters in `model.json`, each a safetensors checkpoint in the key naming diffusers
and peft save (`unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight` and its
`lora_B.weight`, or diffusers' older `lora.down.weight` and `lora.up.weight`; optionally `...to_q.alpha`,
a scalar: the update is scaled by alpha / rank, 1 where absent):

    "adapters": {"style": "style_lora.safetensors"}

Registration maps each pair to the UNet initializer it updates: the graph's initializers are named after
the model's `state_dict` names, a Linear's weight possibly stored transposed (`NAME.T`, as the exporter
folds it).  A pair whose target is in neither spelling, or whose product's shape is not the
initializer's, refuses the package (a PackageError naming the file and the key).

A request's `adapters` (`[{"id", "scale"}]`) apply to its rows only.  The UNet of a cohort runs on one
merged bank: each affected initializer W becomes W + sum(scale * alpha / rank * B @ A) over the set's
adapters.  A bank is made the first time a cohort needs its adapter set, through the stage module's own
weight loading (so every tensor is checked as the registered weights were), and kept for the next
cohorts, the least recently used dropped beyond `BANKS`.  The set is part of the UNet's cohort tag, so
rows with different sets never share a bank.  The banks kept count in the model's resident `workspace`
bytes, and a model deactivated for idleness drops them (its worker's `trim`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loam.serve.scheduler import ServeError
from loam.serve.spec import Package, PackageError, Stage

BANKS = 4
"""Merged banks kept at once (the base weights are always kept besides)."""

PREFIX = "unet."


@dataclass(frozen=True)
class Update:
    """One low-rank update of one UNet initializer: W (or its transpose, `transposed`) += factor * B @ A."""

    target: str  # the initializer's name in the graph's checkpoint
    down: np.ndarray  # A, [rank, ...in]
    up: np.ndarray  # B, [out, rank, ...]
    factor: float  # alpha / rank
    transposed: bool

    def delta(self, scale: float) -> np.ndarray:
        rank = self.down.shape[0]
        product = self.up.reshape(self.up.shape[0], rank).astype(np.float64) @ self.down.reshape(rank, -1)
        product = (scale * self.factor * product).reshape(self.up.shape[0], *self.down.shape[1:])
        return product.T if self.transposed else product


class AdapterBanks:
    """The package's adapters and the merged banks made from them."""

    def __init__(self, stage: Stage, shards: Sequence[Path], adapters: Mapping[str, tuple[Update, ...]]) -> None:
        self.stage = stage
        self.shards = tuple(shards)  # the UNet's checkpoint, read again for each bank made (never kept whole)
        self.adapters = adapters
        self._banks: OrderedDict[str, object] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def read(package: Package, unet: Stage, raw: object, where: str) -> AdapterBanks:
        """The package's `adapters` key, each checkpoint checked against the UNet's initializers."""
        if raw is None or raw == {}:
            return AdapterBanks(unet, (), {})
        if not isinstance(raw, Mapping):
            raise PackageError(f"{where}: key 'adapters' must be an object of adapter id -> safetensors file")
        if unet.spec.source is None:
            raise PackageError(f"{where}: key 'adapters' needs the unet stage's weights as a 'source'")
        from safetensors import safe_open

        shards = package.spec.sources[unet.spec.source]
        shapes: dict[str, tuple[int, ...]] = {}
        for shard in shards:  # the headers only: the payload is read when a bank is made
            with safe_open(str(shard), framework="numpy") as opened:
                for key in opened.keys():
                    shapes[key] = tuple(opened.get_slice(key).get_shape())
        adapters: dict[str, tuple[Update, ...]] = {}
        for name, file in raw.items():
            key = f"adapters.{name}"
            if not isinstance(file, str) or not (package.spec.folder / file).is_file():
                raise PackageError(f"{where}: key {key!r} must name a safetensors file in the package, got {file!r}")
            adapters[name] = _updates(package.spec.folder / file, shapes)
        return AdapterBanks(unet, shards, adapters)

    def check(self, chosen: Sequence[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
        """A request's adapters, each registered and given once (a ServeError names `adapters`), sorted by id."""
        seen: set[str] = set()
        for index, (name, scale) in enumerate(chosen):
            if name not in self.adapters:
                known = ", ".join(sorted(self.adapters)) or "none"
                message = f"adapters[{index}].id {name!r} is not an adapter of this model (its adapters: {known})"
                raise ServeError(message, param="adapters")
            if name in seen:
                raise ServeError(f"adapters[{index}].id {name!r} is given twice", param="adapters")
            if not np.isfinite(scale) or abs(scale) > 100:
                raise ServeError(f"adapters[{index}].scale must be a finite number in [-100, 100]", param="adapters")
            seen.add(name)
        return tuple(sorted((name, scale) for name, scale in chosen if scale != 0))

    @staticmethod
    def key(chosen: Sequence[tuple[str, float]]) -> str:
        """The adapter set's part of a cohort tag: equal sets, equal keys."""
        return ",".join(f"{name}={float(scale)!r}" for name, scale in chosen)

    def weights(self, chosen: Sequence[tuple[str, float]]) -> object:
        """The UNet's weights with `chosen` merged in (the registered weights for none)."""
        if not chosen:
            return self.stage.weights
        key = self.key(chosen)
        with self._lock:
            if key in self._banks:
                self._banks.move_to_end(key)
                return self._banks[key]
        from safetensors.numpy import load_file, save

        merged: dict[str, np.ndarray] = {}
        for shard in self.shards:
            merged.update(load_file(str(shard)))
        for name, scale in chosen:
            for update in self.adapters[name]:
                target = merged[update.target]
                merged[update.target] = (target.astype(np.float64) + update.delta(scale)).astype(target.dtype)
        bank = self.stage.module.Weights.load(save(merged), packed=self.stage.spec.packed)
        with self._lock:
            self._banks[key] = bank
            while len(self._banks) > BANKS:
                self._banks.popitem(last=False)
        return bank

    def held(self) -> list[str]:
        """The keys of the merged banks kept, least recently used first."""
        with self._lock:
            return list(self._banks)

    def nbytes(self) -> int:
        """The bytes the merged banks kept hold (each its own copy of the UNet's weights)."""
        from loam.serve.residency import array_bytes, weight_arrays

        with self._lock:
            banks = list(self._banks.values())
        return sum(array_bytes(weight_arrays(bank)) for bank in banks)

    def drop(self) -> None:
        """Forget every merged bank (the next cohort that needs one makes it again)."""
        with self._lock:
            self._banks.clear()


def _updates(path: Path, base: Mapping[str, tuple[int, ...]]) -> tuple[Update, ...]:
    """The updates of one LoRA checkpoint, each pair's target found among the UNet's initializers (`base`: their
    shapes by name)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise PackageError(f"{path}: not a safetensors checkpoint ({err})") from None
    # diffusers' older naming of the same factors: MODULE.lora.down.weight (A) and MODULE.lora.up.weight (B)
    for old, new in ((".lora.down.weight", ".lora_A.weight"), (".lora.up.weight", ".lora_B.weight")):
        tensors = {k.removesuffix(old) + new if k.endswith(old) else k: v for k, v in tensors.items()}
    updates = []
    for key in sorted(tensors):
        if key.endswith(".alpha"):
            continue
        if not key.endswith(".lora_A.weight"):
            if not key.endswith(".lora_B.weight"):
                raise PackageError(f"{path}: key {key!r} is neither a LoRA factor (lora_A, lora_B) nor an alpha")
            if key.replace(".lora_B.", ".lora_A.") not in tensors:
                raise PackageError(f"{path}: key {key!r} has no lora_A beside it")
            continue
        module = key.removesuffix(".lora_A.weight")
        up_key = f"{module}.lora_B.weight"
        if up_key not in tensors:
            raise PackageError(f"{path}: key {key!r} has no lora_B beside it")
        if not module.startswith(PREFIX):
            raise PackageError(f"{path}: key {key!r} is not the UNet's ('{PREFIX}...'): only the UNet takes adapters")
        target = module.removeprefix(PREFIX) + ".weight"
        transposed = target not in base and f"{target}.T" in base
        if target not in base and not transposed:
            raise PackageError(f"{path}: key {key!r} updates {target!r}, which is not an initializer of the UNet graph")
        down, up = tensors[key], tensors[up_key]
        rank = down.shape[0]
        if up.ndim < 2 or up.shape[1] != rank or int(np.prod(up.shape[2:], dtype=np.int64)) != 1:
            raise PackageError(f"{path}: key {up_key!r} has shape {list(up.shape)}; lora_A gives rank {rank}")
        alpha_key = f"{module}.alpha"
        alpha = float(np.asarray(tensors[alpha_key]).reshape(-1)[0]) if alpha_key in tensors else float(rank)
        update = Update(f"{target}.T" if transposed else target, down, up, alpha / rank, transposed)
        shape = base[update.target]
        wanted = (up.shape[0], *down.shape[1:])
        if (wanted[::-1] if transposed else wanted) != shape:
            raise PackageError(
                f"{path}: key {key!r}: B @ A is {list(wanted)}, the initializer {update.target!r} is {list(shape)}"
            )
        updates.append(update)
    if not updates:
        raise PackageError(f"{path}: holds no LoRA pair (lora_A.weight and lora_B.weight)")
    return tuple(updates)
