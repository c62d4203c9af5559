"""The exports the repository commits for the summary's table: the tiny text-to-image pieces and ViT
(tests/models/vision) and the tiny Whisper (tests/models/whisper), each graph read with its weights as
onnxruntime reads it, run at the two extents its own test module gives it.

Their test modules hold them to onnxruntime in the suite (each with its own checkpoint beside the graph);
this family puts them in `python -m tests.conformance.summary real_exports` beside the pip-carried models.
"""

from __future__ import annotations

import functools

from tests.models.graph_folder import GraphFolder
from tests.models.real_exports.exports import Export, Run


def family_exports(family: str, graphs: GraphFolder) -> tuple[Export, ...]:
    """One export per graph of `graphs`, at the extents its cases give."""
    exports = []
    for name, case in graphs.cases.items():
        runs = tuple(
            Run(
                "x".join(map(str, size)),
                ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in case.inputs(size).items()),
                functools.partial(lambda c, s: [c.inputs(s)], case, size),
            )
            for size in case.sizes
        )
        load = functools.partial(graphs.reference, name)
        exports.append(Export(name, family, load, runs, rtol=graphs.rtol, atol=graphs.atol))
    return tuple(exports)


@functools.cache
def exports() -> tuple[Export, ...]:
    from tests.models.vision import test_vision_models
    from tests.models.whisper import test_whisper

    return (*family_exports("vision", test_vision_models.GRAPHS), *family_exports("whisper", test_whisper.GRAPHS))
