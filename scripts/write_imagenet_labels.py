"""Dev-time: write ImageNet's 1000 class names, one a line, for the serving tests' classifier package.

The names are the list torchvision ships (`torchvision/models/_meta.py`, `_IMAGENET_CATEGORIES`), read
from its wheel as data (`ast.literal_eval`; nothing of the wheel is imported or run).  A decision package
needs distinct labels: torchvision's list already tells its two cranes and two maillots apart, and a name
that still repeated would get its class index (`NAME (class 517)`).

    pip download --no-deps torchvision==0.22.0 -d /tmp/tv
    python scripts/write_imagenet_labels.py /tmp/tv/torchvision-0.22.0-*.whl tests/serve/imagenet_labels.txt
"""

from __future__ import annotations

import argparse
import ast
import zipfile
from pathlib import Path

META = "torchvision/models/_meta.py"


def categories(wheel: Path) -> list[str]:
    """The wheel's ImageNet class names, in class order."""
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read(META).decode("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_IMAGENET_CATEGORIES" for t in node.targets):
            names = ast.literal_eval(node.value)
            assert isinstance(names, list) and len(names) == 1000 and all(isinstance(n, str) for n in names)
            return names
    raise SystemExit(f"{wheel}: {META} has no _IMAGENET_CATEGORIES")


def distinct(names: list[str]) -> list[str]:
    """`names` with each repeated name after its first made distinct by its class index."""
    seen: set[str] = set()
    out = []
    for index, name in enumerate(names):
        out.append(name if name not in seen else f"{name} (class {index})")
        seen.add(name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path, help="a torchvision wheel (pip download --no-deps torchvision)")
    parser.add_argument("output", type=Path, help="the labels file to write")
    args = parser.parse_args()
    labels = distinct(categories(args.wheel))
    args.output.write_text("\n".join(labels) + "\n", encoding="utf-8")
    print(f"wrote {len(labels)} labels to {args.output}")


if __name__ == "__main__":
    main()
