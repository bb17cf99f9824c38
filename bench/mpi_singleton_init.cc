// What a one-process run would pay for initialising MPI without a launcher (a "singleton"
// MPI_Init): gemmax no longer does, and bench/startup.sh reports this as the cost avoided.
#include <mpi.h>

#include <chrono>
#include <cstdio>

int main(int argc, char** argv) {
  const auto t0 = std::chrono::steady_clock::now();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const auto t1 = std::chrono::steady_clock::now();
  MPI_Finalize();
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("MPI_Init_thread %.1f ms, MPI_Finalize %.1f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  return 0;
}
