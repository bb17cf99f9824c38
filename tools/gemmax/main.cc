// gemmax: train and inspect Gemma-4 MoE models.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "commands.h"
#include "gemmax/base/error.h"
#include "gemmax/train/stop_signal.h"

namespace {

// SIGINT and SIGTERM are handled from the process's first initialiser on: the loader runs the
// executable's .preinit_array before any shared library's initialisers and every static
// constructor, so that a launcher's early stop request (a job cancelled as it starts) ends
// gemmax with status 0, having written nothing (stop_signal.h), instead of killing it. Started
// by bin/gemmax (tools/launcher), the signals were blocked before this process's libraries were
// mapped: they are unblocked here, once handled, and one that arrived in between is delivered.
void handle_stop_signals_first(int, char**, char** envp) {
  gemmax::StopSignal::install_at_startup();
  // getenv does not work yet: the C library sets environ in its own initialiser, which runs later.
  const char kName[] = "GEMMAX_LAUNCHER_BLOCKED=";
  const char* blocked = nullptr;
  for (char** e = envp; e && *e && !blocked; ++e)
    if (std::strncmp(*e, kName, sizeof kName - 1) == 0) blocked = *e + sizeof kName - 1;
  if (blocked == nullptr) return;
  sigset_t set;
  sigemptyset(&set);
  for (const char* p = blocked; *p;) {
    char* end = nullptr;
    const long s = std::strtol(p, &end, 10);
    if (end == p) break;
    if (s == SIGINT || s == SIGTERM) sigaddset(&set, int(s));
    p = *end == ',' ? end + 1 : end;
  }
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
}
[[gnu::used, gnu::section(".preinit_array")]] void (*const kHandleStopSignalsFirst)(
    int, char**, char**) = handle_stop_signals_first;

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"train", gemmax::cmd_train, "train a model: gemmax train [config.yml] [key=value ...]"},
    {"eval", gemmax::cmd_eval,
     "evaluate a checkpoint or HF folder: gemmax eval [config.yml] checkpoint=DIR | hf_dir=DIR"},
    {"tokenize", gemmax::cmd_tokenize,
     "write a token shard from text files: gemmax tokenize --out FILE.bin INPUT..."},
    {"grad", gemmax::cmd_grad, "loss and gradients of a Hugging Face Gemma-4 folder on one batch"},
    {"export", gemmax::cmd_export,
     "write a checkpoint as a Hugging Face folder: gemmax export --checkpoint DIR --out HF_DIR"},
    {"sample", gemmax::cmd_sample,
     "generate text from a model: gemmax sample --model DIR --prompt TEXT"},
    {"chat", gemmax::cmd_chat,
     "talk to a model through its chat template: gemmax chat --model DIR"},
    {"bench", gemmax::cmd_bench,
     "time training steps, by op family: gemmax bench [config.yml] [key=value ...]"},
    {"info", gemmax::cmd_info,
     "print a model's parameters and FLOPs: gemmax info [config.yml] [key=value ...]"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: gemmax <command> [args]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-9s %s\n", c.name, c.help);
  std::fprintf(out, "\n`gemmax <command> --help` describes each command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  ::unsetenv("GEMMAX_LAUNCHER_BLOCKED");  // not inherited by what this process starts
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    // Only training stops gracefully; the other commands end by the signals' default actions
    // (or the handlers the process was started with) from here on.
    if (c.run != gemmax::cmd_train) gemmax::StopSignal::restore_startup_handlers();
    try {
      const int rc = c.run(argc - 2, argv + 2);
      // What a command printed (a summary, a JSON result) is output too: a failed write fails.
      std::cout.flush();
      if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout))
        gemmax::fail("writing the standard output failed (disk full, or a closed pipe?)");
      return rc;
    } catch (const gemmax::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "gemmax: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
