#!/bin/sh
# Downloads the Debian packages gemmax's build needs (bookworm's, as scripts/install_deps.sh
# installs them) into a folder, for a GPU machine without a package registry: carry the folder
# there and bench/gpu_check.sh unpacks it with dpkg -x. Run on a Debian 12 machine with apt.
#
#   bench/fetch_gpu_deps.sh [DIR]     (default: bench/gpu_deps, which git ignores)
set -e
dest=${1:-$(dirname "$0")/gpu_deps}
mkdir -p "$dest"
cd "$dest"
# Development packages and the shared libraries their .so links point to; pkg-config for
# machines without one. The C/C++ runtime (libc6, libstdc++6, libgcc-s1) is the machine's own.
apt-get download \
  libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev \
  libsentencepiece-dev libsentencepiece0 \
  zlib1g-dev zlib1g \
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32 \
  libgtest-dev \
  pkgconf pkgconf-bin libpkgconf3
ls -l
