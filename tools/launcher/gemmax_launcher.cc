// bin/gemmax: a static launcher for the engine beside it (bin/gemmax-engine), so that SIGINT and
// SIGTERM are caught from the process's first instructions. The engine is a dynamically linked
// C++ program, and the loader maps its shared libraries before any of its code runs: on a
// 2-core machine that takes 1-2.5 ms, in which a stop request would kill it by the signal's
// default action. This program links nothing dynamically, so nothing comes before main but the
// C library's own start-up; it blocks both signals, which stay blocked, and pending, across
// exec, and the engine unblocks them once its handlers are installed (tools/gemmax/main.cc).
// They are blocked by the process's first instructions, before the C library starts: what
// comes before is the kernel's own exec.
// A request that arrived in between is then handled as any other: exit 0, nothing written.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

// The mask the process was started with, as the kernel's rt_sigprocmask reports it (8 bytes).
extern "C" unsigned long gemmax_launcher_mask_before;
unsigned long gemmax_launcher_mask_before = 0;
constexpr unsigned long kStopMask = (1ul << (SIGINT - 1)) | (1ul << (SIGTERM - 1));

// The process's entry point (the link's -e): its first instructions block both signals with
// one system call, then it enters the C library's own _start with the registers the kernel
// set (rsp at argc, rdx the exit function to register).
asm(R"(
  .text
  .globl gemmax_launcher_entry
  .type gemmax_launcher_entry, @function
gemmax_launcher_entry:
  mov %rdx, %r12
  mov $)" "14" R"(, %eax
  xor %edi, %edi
  lea gemmax_launcher_stop_mask(%rip), %rsi
  lea gemmax_launcher_mask_before(%rip), %rdx
  mov $8, %r10d
  syscall
  mov %r12, %rdx
  jmp _start
  .section .rodata
  .align 8
gemmax_launcher_stop_mask:
  .quad )" "16386" R"(
  .text
)");
static_assert(SYS_rt_sigprocmask == 14 && SIG_BLOCK == 0 && kStopMask == 16386,
              "the entry point's constants (x86-64 Linux)");

int main(int, char** argv) {
  sigset_t before;
  sigemptyset(&before);
  for (int s : {SIGINT, SIGTERM})
    if (gemmax_launcher_mask_before & (1ul << (s - 1))) sigaddset(&before, s);
  // Which of them this launcher blocked (a parent may have blocked them itself: they stay so).
  char blocked[16] = "";
  for (int s : {SIGINT, SIGTERM})
    if (!sigismember(&before, s))
      std::snprintf(blocked + std::strlen(blocked), sizeof blocked - std::strlen(blocked), "%s%d",
                    blocked[0] ? "," : "", s);
  setenv("GEMMAX_LAUNCHER_BLOCKED", blocked, 1);

  char engine[4096];
  const ssize_t n = readlink("/proc/self/exe", engine, sizeof engine - 32);
  if (n <= 0) {
    std::fprintf(stderr, "gemmax: cannot read /proc/self/exe: %s\n", std::strerror(errno));
    return 127;
  }
  engine[n] = 0;
  char* slash = std::strrchr(engine, '/');
  std::strcpy(slash ? slash + 1 : engine, "gemmax-engine");
  execv(engine, argv);
  std::fprintf(stderr,
               "gemmax: cannot run %s (%s): the launcher bin/gemmax needs the engine "
               "gemmax-engine beside it; copy both together\n",
               engine, std::strerror(errno));
  return 127;
}
