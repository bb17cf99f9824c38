// Encode speed of a tokenizer (tokenizer.json or .model) on one thread: each line's "text" of a
// JSONL file encoded, tokens per second reported; the ids written for bench/tokenizer_json.sh to
// compare with the `tokenizers` library's.
//   tokenizer_json_bench TOKENIZER_PATH FILE.jsonl IDS_OUT [REPEATS]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmax/base/error.h"
#include "gemmax/data/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TOKENIZER_PATH FILE.jsonl IDS_OUT [REPEATS]\n", argv[0]);
    return 2;
  }
  try {
    const auto tok = gemmax::make_tokenizer("auto", argv[1]);
    std::vector<std::string> texts;
    std::ifstream in(argv[2]);
    size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
      bytes += texts.back().size();
    }
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
    double best = 1e30;
    std::vector<std::vector<int32_t>> ids(texts.size());
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < texts.size(); ++i) ids[i] = tok->encode(texts[i]);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    size_t tokens = 0;
    std::ofstream out(argv[3], std::ios::binary);
    for (const auto& v : ids) {  // per line: count, then the ids (int32, little-endian)
      tokens += v.size();
      const int32_t n = int32_t(v.size());
      out.write(reinterpret_cast<const char*>(&n), 4);
      out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(4 * v.size()));
    }
    std::printf("%zu documents, %zu bytes, %zu tokens, best of %d: %.3f s, %.0f tokens/s (%s)\n",
                texts.size(), bytes, tokens, repeats, best, double(tokens) / best,
                tok->describe().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
