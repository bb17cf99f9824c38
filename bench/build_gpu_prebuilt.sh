#!/bin/bash
# Builds, on this machine, the cuda-enabled gemmax and gemmax_tests that bench/gpu_check.sh
# --prebuilt DIR runs on a GPU machine, so that the GPU's window is spent on the GPU:
#
#   bench/build_gpu_prebuilt.sh [DIR]        (default build-gpu/prebuilt; build tree build-gpu/tree)
#
# DIR is scripts/package.sh's folder (DIR/bin: gemmax with its cuda module libgemmax_cuda.so,
# DIR/lib: the shared libraries a bare machine may lack, found through $ORIGIN/../lib) plus the
# tests' binary gemmax_tests (and CUTLASS's grouped-GEMM bench gmm_cutlass, with its GPU tests,
# when the configure found CUTLASS's headers) in DIR/bin, which load the same module; DIR/
# manifest.txt says what is in it. Not carried: the C library, the driver, and the CUDA
# libraries the module links (the CUDA runtime, cuBLASLt, cuDNN, NVRTC: 1 GB together), which
# are the GPU machine's own, beside its toolkit (gpu_check.sh looks in /usr/local/cuda/lib64
# when the loader does not find them). The cuDNN frontend is headers, compiled in. MPI and NCCL
# are left out (a one-GPU check); the folder and the repository's tracked files must fit the
# 64 MiB a GPU run carries together. Needs nvcc (CUDA 12.4 or newer); Hopper code only (sm_90a).
# ccache is used when CMAKE_CUDA_COMPILER_LAUNCHER / CMAKE_CXX_COMPILER_LAUNCHER say so.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$here/build-gpu/prebuilt}
tree=${GEMMAX_PREBUILT_TREE:-$here/build-gpu/tree}
limit_mib=64
launcher=()
command -v ccache > /dev/null &&
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$here" -B "$tree" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DGEMMAX_CUDA=ON -DGEMMAX_MPI=OFF -DGEMMAX_NCCL=OFF \
  -DGEMMAX_FUZZ=OFF "-DGEMMAX_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath,\$ORIGIN/../lib" \
  "-DCMAKE_MODULE_LINKER_FLAGS=-Wl,-rpath,\$ORIGIN/../lib"
cmake --build "$tree" -j "$(nproc)" --target gemmax gemmax_tests
bins=("$tree/bin/gemmax" "$tree/tests/gemmax_tests")
# CUTLASS's grouped-GEMM bench and its /gpu test, when the configure found CUTLASS's headers
# (cmake/cutlass.cmake; minutes more to compile).
if cmake --build "$tree" --target help | grep -q '^\.\.\. gemmax_cutlass$'; then
  cmake --build "$tree" -j "$(nproc)" --target gemmax_cutlass
  bins+=("$tree/bin/gmm_cutlass")
else
  echo "build_gpu_prebuilt.sh: no CUTLASS headers: gmm_cutlass is left out" >&2
fi
"$here/scripts/package.sh" "$tree" "$dest"
cp "${bins[@]:1}" "$dest/bin/"
# Symbol tables too (6 MiB of the binaries; the device code is kept whole).
for b in "$dest"/bin/*; do strip --strip-unneeded "$b"; done
# The libraries the test binaries need beyond the package's (GoogleTest is static).
system='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil)\.so'
cuda='^(libcuda|libcublas|libcublasLt|libcudart|libcudnn|libnccl|libnvidia|libnvrtc)'
ldd "$dest"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r name path; do
    [[ $name =~ $system || $name =~ $cuda || -e $dest/lib/$name ]] && continue
    cp -L "$path" "$dest/lib/$name"
  done
{
  echo "gemmax prebuilt for a GPU machine: $(git -C "$here" log -1 --format='%H %s' 2>/dev/null)"
  echo "built $(date -u +%FT%TZ) on $(uname -m), $(nvcc --version | tail -1)"
  echo
  ls -l "$dest/bin" "$dest/lib"
  echo
  ldd "$dest"/bin/*
} > "$dest/manifest.txt"
# The limit is on what travels: this folder and the repository's tracked files together.
size_kib=$(du -sk "$dest" | cut -f1)
tree_kib=$(($(cd "$here" && git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) / 1024))
echo "$dest: $((size_kib / 1024)) MiB, with the repository's files $(((size_kib + tree_kib) / 1024)) MiB (limit $limit_mib MiB)"
if [ $((size_kib + tree_kib)) -gt $((limit_mib * 1024)) ]; then
  echo "build_gpu_prebuilt.sh: $dest and the repository's files are over $limit_mib MiB" >&2
  exit 1
fi
