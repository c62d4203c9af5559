"""`loam serve`'s roles: the contracts a package can serve, as one table.

A package's `model.json` names its `role`, and `ROLES[role]` says everything the server does for it:

- `schema`: what `model.json` says for the role beyond the keys every package has (`PackageSchema`:
  the stage keys it reads), which `loam.serve.package.read_package` checks;
- `control`: the role's built-in control, made for a package that names no `control` file of its own;
- `worker`: given the registered package, its control (its own or the built-in one) and its metrics,
  starts the model's worker (a `loam.serve.scheduler.Worker`): it refuses a control that lacks a call of
  the role's contract (a `Control` Protocol of the role's module), settles the control's state
  (`prepare`) and checks the stages against what the role runs;
- `routes`: given the `Server` and the role's name, the HTTP routes that serve the role's models (they
  find a model with `Server.model(name, role)`); `loam.serve.app` mounts every role's.

    role        schema (stage keys)             control           worker (cohorts of)             routes
    text        graph, source, options, packed; TextControl       TextWorker (prompt spans and    completions, chat
                speculative, image (top-level                     decode steps over a KV pool)    completions, sessions
                keys)
    embedding   the same, and pooling,          EmbeddingControl  FiniteWorker (finite requests)  embeddings
                normalize, output
    sequence    the same, and publish,          SequenceControl   SequenceWorker (finite          score, rerank,
                activation, output                                requests over supplied ids)     pooling
    decision    the same, and specialize;       FramedDecisions   DecisionTextWorker (a decoder)  classify
                framing, answers and scores                       or ClassifierWorker (finite,
                (top-level keys)                                  a build per shape, on demand)
    image       the same; image, scheduler and  ImageControl      StreamWorker (continuing        images
                adapters (top-level keys)                         requests: encode, denoising
                                                                  steps, decode)
    recognition the same; generation and        WhisperRecognition StreamWorker (30 s windows  audio
                recording_seconds (top-level                       and decoder steps of         transcriptions
                keys)                                              continuing audio)
    activity    the same; recording_seconds     SileroActivity    StreamWorker (chunks of         audio activity,
                (top-level key)                                   continuing audio)               live audio
    speech      the same; voice and             PiperSpeech       StreamWorker (continuing        audio speech
                max_characters (top-level keys)                   requests: a sentence a cohort)

Adding a role (audio, images, known-token stages) is one entry here plus its modules: the
role's module (`loam.serve.text` and `loam.serve.finite` are the two to read, and `loam.serve.stream` for a role
whose requests advance step by step over continuing input or stages) defines its control
Protocol (extending `loam.serve.spec.Control`, `runtime_checkable`), its built-in control, its worker
(a `Worker` subclass whose `step` forms and runs cohorts, with `run_cohort` so that only a member at
fault fails) and the function that makes that worker for a package; its HTTP module defines the
routes (paths no other role serves), built on `loam.serve.web`'s fields, errors and sinks.  A worker
says what memory its model holds by overriding `Worker.kv_bytes`, `workspace_bytes`, `resident_bytes`
and `trim` (`loam.serve.residency`), and a route refuses a request too big for the memory budget with
`Server.admit_request` before submitting it.  A role's
modules see packages through `loam.serve.spec` alone: `package`, `server` and `app` import this table,
and the import test refuses a cycle.  Nothing else names a role: the server looks the package's role
up here, and `model.json`'s `role` is checked against this table's names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loam.serve import (
    activity_http,
    decision_http,
    embedding_http,
    image_http,
    recognition_http,
    sequence_http,
    speech_http,
    text_http,
)
from loam.serve.activity import SileroActivity, serve_activity
from loam.serve.decision import FramedDecisions, serve_decision
from loam.serve.finite import EmbeddingControl, serve_finite
from loam.serve.image import ImageControl, serve_image
from loam.serve.live_http import Live
from loam.serve.metrics import ModelMetrics
from loam.serve.recognition import WhisperRecognition, serve_recognition
from loam.serve.scheduler import Worker
from loam.serve.sequence import SequenceControl, serve_sequence
from loam.serve.spec import Control, Package, PackageSchema
from loam.serve.speech import PiperSpeech, serve_speech
from loam.serve.text import TextControl, serve_text

if TYPE_CHECKING:
    from starlette.routing import Route

    from loam.serve.server import Server


@dataclass(frozen=True)
class Role:
    """One contract `loam serve` serves: how its package is read, controlled, scheduled and reached."""

    name: str
    schema: PackageSchema
    control: Callable[[], Control]
    worker: Callable[[Package, Control, ModelMetrics], Worker]
    routes: Callable[[Server, str], Sequence[Route]]
    live: Live | None = None
    """How the live audio WebSocket reaches the role's models (`loam.serve.live_http`), where it does."""


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role("text", PackageSchema(keys=("speculative", "image")), TextControl, serve_text, text_http.routes),
        Role(
            "embedding",
            PackageSchema(stage_keys=("pooling", "normalize", "output")),
            EmbeddingControl,
            serve_finite,
            embedding_http.routes,
        ),
        Role(
            "sequence",
            PackageSchema(stage_keys=("publish", "activation", "output")),
            SequenceControl,
            serve_sequence,
            sequence_http.routes,
        ),
        Role(
            "decision",
            PackageSchema(stage_keys=("specialize",), keys=("framing", "answers", "scores")),
            FramedDecisions,
            serve_decision,
            decision_http.routes,
        ),
        Role(
            "image",
            PackageSchema(keys=("image", "scheduler", "adapters")),
            ImageControl,
            serve_image,
            image_http.routes,
        ),
        Role(
            "recognition",
            PackageSchema(keys=("generation", "recording_seconds")),
            WhisperRecognition,
            serve_recognition,
            recognition_http.routes,
            recognition_http.LIVE,
        ),
        Role(
            "activity",
            PackageSchema(keys=("recording_seconds",)),
            SileroActivity,
            serve_activity,
            activity_http.routes,
            activity_http.LIVE,
        ),
        Role("speech", PackageSchema(keys=("voice", "max_characters")), PiperSpeech, serve_speech, speech_http.routes),
    )
}
"""Each role by name, in the order `model.json`'s refusals list them."""
