#!/bin/sh
# Installs what gemmax needs to build and test on Debian 12 (bookworm) or newer.
# Everything comes from Debian's archive; nothing is downloaded at run time.
set -e
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
# Open MPI (libopenmpi-dev, openmpi-bin) runs multi-rank FSDP training and its tests; without it
# gemmax builds and trains on one rank. python3-jinja2: the chat-template renderer's reference in
# the tests (they skip without it). libicu-dev: Unicode character properties and normalization.
# libpcre2-dev: the regexes of Hugging Face tokenizer.json files. libgmp-dev: Python's unbounded
# integers in chat templates.
PACKAGES="g++ cmake make pkg-config libgtest-dev nlohmann-json3-dev libyaml-cpp-dev \
libsentencepiece-dev sentencepiece libicu-dev libpcre2-dev libgmp-dev zlib1g-dev libprotobuf-dev protobuf-compiler libopenmpi-dev \
openmpi-bin python3-torch python3-numpy python3-jinja2 clang libclang-rt-dev"  # clang: the fuzz targets (fuzz/)
# Optional, for bench/gemm_choice only (oneDNN and libxsmm measured against gemmax's kernels;
# the build and the tests do not need them): GEMMAX_BENCH_DEPS=1 scripts/install_deps.sh
if [ "${GEMMAX_BENCH_DEPS:-0}" = 1 ]; then PACKAGES="$PACKAGES libdnnl-dev libxsmm-dev"; fi
# Skip apt when everything is already there (re-runs, CI caches).
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
