"""The real exports on the WGSL module: every Silero VAD file and the light-zoo CNNs whose device run
is quick on a CPU adapter (SqueezeNet, ShuffleNet, AlexNet), each built once with every kernel on the
device and run as its numpy case runs, against onnxruntime; and the Piper voice's short sentence, built
with host fallback, whose report names each kernel the host computes.  AlexNet's fc6 weight (144 MiB) passes
WebGPU's default 128 MiB binding, so the module uploads it in two parts (`split-wide-weights`).

ResNet-50 and the Inceptions run too but take a minute or more per image on llvmpipe, so the suite
leaves them to `python -m tests.conformance.summary real_exports`'s table, which builds every model for
WGSL.  VGG-19 and ZFNet-512 build too (fc6 in four and three parts) but do not run on llvmpipe: their
fc6 product contracts 25088 and 18432 features, and one invocation of its tile program then loops past
llvmpipe's cap of 65,535 iterations (the module refuses the results, naming the cap).
"""

from __future__ import annotations

import pytest

from tests.models.real_exports import exports, light_zoo, piper, silero_vad

pytestmark = pytest.mark.xdist_group("real_exports_wgsl")

ON_THE_DEVICE = ("light_squeezenet", "light_shufflenet", "light_bvlc_alexnet")


def cases() -> list[exports.Export]:
    return [*silero_vad.exports(), *(e for e in light_zoo.exports() if e.name in ON_THE_DEVICE)]


@pytest.mark.parametrize(("export", "run"), exports.pytest_params(cases()))
def test_matches_onnxruntime_on_the_device(export: exports.Export, run: exports.Run) -> None:
    pytest.importorskip("wgpu")
    exports.check(export, run, backend="wgsl")
    result = exports.built(export, "wgsl")
    assert result.fusion is not None and result.fusion.device is not None
    assert not result.fusion.device.host, f"{export.name}: kernels on the host: {result.fusion.device.host}"


def test_the_piper_voice_speaks_with_its_host_kernels_named() -> None:
    """The voice's short sentence through the WGSL module built with host fallback: the same waveform as
    onnxruntime's, and the report's host nodes exactly the kernels with no device form yet."""
    pytest.importorskip("wgpu")
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))
    (export,) = piper.exports()
    run = next(r for r in export.runs if r.label == "sentence-short")
    exports.check(export, run, backend="wgsl")
    device = exports.built(export, "wgsl").fusion.device  # type: ignore[union-attr]  # built with fusion
    assert device is not None and exports.host_counts(device.host) == piper.HOST_NODES, device and device.host
