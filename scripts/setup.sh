#!/usr/bin/env bash
# setup.sh — make this Debian bookworm machine ready to build PTD Studio, then configure
# the build in ./build. Idempotent: installs only the packages that are missing (as root,
# or through sudo) and re-runs CMake's configure step, which is cheap when nothing changed.
#
#   scripts/setup.sh            install what is missing, configure build/
#   BUILD_DIR=out scripts/setup.sh    configure another folder
#   PTD_CMAKE_ARGS="-DENABLE_CUDA=OFF" scripts/setup.sh    extra CMake arguments
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

# Everything the project builds, tests and fuzzes with — all from Debian bookworm main.
packages=(
  build-essential cmake ninja-build pkg-config git
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev      # job spec, JSON, CLI
  libimgui-dev libglfw3-dev libgl-dev libopengl-dev libglx-dev libstb-dev  # ptd-studio
  libssh-dev                                               # launcher
  libgloo-dev libopenblas-dev                              # ptd-engine (CPU)
  libgtest-dev                                             # tests
  xvfb xauth libgl1-mesa-dri                               # GUI screenshots under Xvfb
  openssh-server iproute2                                  # launcher tests (sshd on 127.0.0.1; two hosts in netns)
  slurm-wlm munge                                          # launcher tests: a real single-host Slurm (tests/slurm_fixture.h)
  bsdutils                                                 # script(1): TTY tests
  python3-yaml python3-jsonschema                          # export / launch tests: JobSet manifests parsed and checked against the CRD schema
  clang libclang-rt-14-dev                                 # libFuzzer (scripts/fuzz.sh)
)

missing=()
for p in "${packages[@]}"; do
  # "install ok installed" only for packages really present (not just known/removed).
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "setup: error: need root or sudo to run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} Debian packages present"
fi

generator=()
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  generator=(-G Ninja)
fi
# Show PTD's own configure messages (CUDA on/off, studio on/off); everything on failure.
# shellcheck disable=SC2086
if ! log=$(cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${PTD_CMAKE_ARGS:-} 2>&1); then
  echo "$log" >&2
  echo "setup: error: CMake configure failed (full output above)" >&2
  exit 1
fi
grep -E '^-- PTD:' <<<"$log" | sed 's/^-- /setup: /' || true
echo "setup: configured $BUILD_DIR/ — build with: cmake --build $BUILD_DIR"
