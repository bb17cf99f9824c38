// Hugging Face dataset files: any bytes read as a Parquet file, an Arrow IPC file and a JSON
// Lines file, for a text column and for a `messages` column, through the reader training uses
// (for_each_hf_row; Parquet and Arrow by Apache Arrow in libgemmax_arrow.so, when the fuzz build
// has it), and each row through the record encoder with the byte tokenizer.
#include <cstdlib>

#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/data/hf_dataset.h"
#include "gemmax/data/record_encoder.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
#ifdef GEMMAX_FUZZ_ARROW_MODULE
  ::setenv("GEMMAX_ARROW_MODULE", GEMMAX_FUZZ_ARROW_MODULE, 0);
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmax;
  static const auto tok = make_byte_tokenizer();
  static const ChatTemplate chat(ChatTemplateSource{
      "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}", "fuzz"});
  const RecordEncoder text(*tok, &chat, "text", true, false);
  for (const char* name : {"input.parquet", "input.arrow", "input.jsonl"}) {
    const std::string path = fuzz::write_scratch(name, fuzz::as_view(data, size));
    for (const std::vector<std::string>& columns :
         {std::vector<std::string>{"text"}, std::vector<std::string>{"messages", "text"}}) {
      try {
        for_each_hf_row(path, columns, [&](const nlohmann::ordered_json& row, const std::string& where) {
          try {
            (void)text.encode(row, where);
          } catch (const Error&) {
          }
        });
      } catch (const Error&) {
      }
    }
  }
  return 0;
}
