// The token-shard reader: open any bytes as a shard, validate its tokens, and pack a few batches
// from it through the shards loader, packed and unpacked, with the loss mask, in one pass, and
// first-fit after grain's window shuffle (with and without truncation).
#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/data/loader.h"
#include "gemmax/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmax;
  const std::string path = fuzz::write_scratch("input.bin", fuzz::as_view(data, size));
  try {
    const TokenShard shard(path);
    shard.validate_tokens(int64_t(shard.header().vocab_size));
  } catch (const Error&) {
  }
  for (const int mode : {0, 1, 2, 3, 4, 5}) {
    try {
      DataOptions o;
      o.dataset_type = "shards";
      o.dataset_path = path;
      o.packing = mode % 2 == 0;
      o.completion_only = mode >= 2;  // a version-2 shard's loss mask through packing
      o.eval = mode == 3;             // one pass, no wrap (an eval stream)
      if (mode >= 4) {  // MaxText's grain pipeline; mode 5 with the loss mask, no truncation
        o.packing = true;
        o.packing_type = "first_fit";
        o.shuffle = true;
        o.shuffle_buffer = 3;
        o.truncate = mode == 4;
        o.completion_only = mode == 5;
      }
      o.batch = 2;
      o.seq = 8;
      o.vocab_size = 259;  // the byte tokenizer's, which the loader pairs with the shard
      auto loader = make_data_loader(o);
      for (int i = 0; i < 3 && !loader->exhausted(); ++i) (void)loader->next();
      loader->restore(loader->state());
    } catch (const Error&) {
    }
  }
  return 0;
}
