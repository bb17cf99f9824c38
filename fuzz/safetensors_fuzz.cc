// The safetensors reader (header and data): open any bytes, then read every tensor it lists,
// as a view and converted to float32.
#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmax;
  const std::string path = fuzz::write_scratch("input.safetensors", fuzz::as_view(data, size));
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& [key, value] : f.metadata()) (void)(key.size() + value.size());
    for (const SafetensorsEntry& e : f.entries()) {
      const Tensor view = f.tensor(e.name);
      const uint8_t* bytes = static_cast<const uint8_t*>(view.raw());
      unsigned sum = 0;
      for (size_t i = 0; i < view.nbytes(); ++i) sum += bytes[i];  // every byte is readable
      (void)sum;
      if (e.supported) (void)f.read_as(e.name, DType::F32);
    }
  } catch (const Error&) {
  }
  return 0;
}
