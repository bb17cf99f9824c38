// TEMP: dispatches only `tokenize`, so that the data work can be tried before the real main lands.
#include <cstdio>
#include <cstring>

#include "commands.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "tokenize") == 0) return gemmax::cmd_tokenize(argc - 2, argv + 2);
  std::puts("gemmax");
  return 0;
}
