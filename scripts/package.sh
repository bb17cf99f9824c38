#!/bin/bash
# Makes one folder to ship from a build tree: it runs on a CPU-only machine as it is, and on a
# GPU machine (backend=cuda) and under mpirun where those machines have CUDA or Open MPI.
#
#   scripts/package.sh [BUILD] [DEST]        (defaults: build, BUILD/package)
#
# DEST/bin: gemmax (the static launcher), gemmax-engine and its modules, libgemmax_cuda.so, libgemmax_mpi.so and libgemmax_arrow.so (those the build
# made), found beside the binary. DEST/lib: the shared libraries the binary needs that a bare
# machine may lack (yaml-cpp, sentencepiece, OpenMP, zlib, the C++ runtime), found through the
# binary's run path $ORIGIN/../lib. Not carried: the C library, and the libraries the modules
# load from the machine's own CUDA (the runtime, cuBLASLt, cuDNN, NVRTC, NCCL) and Open MPI
# installations; the binary starts without them, and a module that cannot find one says which.
# DEST/manifest.txt lists what is in the folder.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
dest=${2:-$build/package}
[ -x "$build/bin/gemmax" ] || { echo "package.sh: no $build/bin/gemmax: build first" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
cp "$build/bin/gemmax" "$build/bin/gemmax-engine" "$dest/bin/"
for m in libgemmax_cuda.so libgemmax_mpi.so libgemmax_arrow.so; do
  [ -f "$build/bin/$m" ] && cp "$build/bin/$m" "$dest/bin/"
done
# The Parquet/Arrow module's Arrow libraries (from the pyarrow wheel, in build/lib/).
for l in "$build"/lib/libarrow.so.* "$build"/lib/libparquet.so.*; do
  [ -f "$l" ] && cp "$l" "$dest/lib/"
done
system='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil)\.so'
ldd "$dest/bin/gemmax-engine" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $system ]] || cp -L "$path" "$dest/lib/$name"
  done
{
  echo "gemmax $(git -C "$here" log -1 --format='%H' 2>/dev/null || echo '(no git)'), packaged $(date -u +%FT%TZ) on $(uname -m)"
  echo
  (cd "$dest" && ls -l bin lib)
} > "$dest/manifest.txt"
echo "$dest: $(du -sh "$dest" | cut -f1)"
