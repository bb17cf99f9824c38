#include "gemmax/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

#include "gemmax/base/error.h"

namespace gemmax {

// The format is little-endian; on such a host the mapped tokens are used in place.
static_assert(std::endian::native == std::endian::little,
              "token shards assume a little-endian host");

namespace {

template <class T>
void put(unsigned char* buf, size_t at, T v) {
  std::memcpy(buf + at, &v, sizeof v);
}
template <class T>
T get(const unsigned char* buf, size_t at) {
  T v;
  std::memcpy(&v, buf + at, sizeof v);
  return v;
}

void encode_header(const ShardHeader& h, unsigned char* buf) {
  std::memset(buf, 0, kShardHeaderBytes);
  std::memcpy(buf, kShardMagic, 8);
  put(buf, 8, h.version);
  put(buf, 12, h.dtype);
  put(buf, 16, h.num_tokens);
  put(buf, 24, h.num_documents);
  put(buf, 32, h.vocab_size);
  put(buf, 36, h.eos_id);
  put(buf, 40, h.bos_id);
  put(buf, 44, h.pad_id);
}

ShardHeader decode_header(const unsigned char* buf) {
  ShardHeader h;
  h.version = get<uint32_t>(buf, 8);
  h.dtype = get<uint32_t>(buf, 12);
  h.num_tokens = get<uint64_t>(buf, 16);
  h.num_documents = get<uint64_t>(buf, 24);
  h.vocab_size = get<uint32_t>(buf, 32);
  h.eos_id = get<uint32_t>(buf, 36);
  h.bos_id = get<uint32_t>(buf, 40);
  h.pad_id = get<uint32_t>(buf, 44);
  return h;
}

// The magic as text when printable, else as hex bytes.
std::string show_bytes(const unsigned char* p, size_t n) {
  std::string s;
  bool printable = true;
  for (size_t i = 0; i < n; ++i) printable &= (p[i] >= 32 && p[i] < 127);
  if (printable) return "\"" + std::string(reinterpret_cast<const char*>(p), n) + "\"";
  char hex[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", p[i]);
    s += (i ? " " : "") + std::string(hex);
  }
  return s;
}

uint32_t id_field(int32_t id) { return id < 0 ? kShardNoId : uint32_t(id); }

}  // namespace

// ---- writer ---------------------------------------------------------------------------------

ShardWriter::ShardWriter(std::string path, int64_t vocab_size, int32_t eos_id, int32_t bos_id,
                         int32_t pad_id)
    : path_(std::move(path)) {
  if (vocab_size <= 0 || vocab_size > int64_t(kShardNoId))
    fail("token shard '", path_, "': tokenizer vocab size ", vocab_size, " is not in [1, 2^32-1)");
  if (eos_id < 0 || eos_id >= vocab_size)
    fail("token shard '", path_, "': the tokenizer's eos id ", eos_id, " is not in [0, ",
         vocab_size, "); shards separate documents by eos, so the tokenizer needs one");
  header_.vocab_size = uint32_t(vocab_size);
  header_.eos_id = uint32_t(eos_id);
  header_.bos_id = id_field(bos_id);
  header_.pad_id = id_field(pad_id);
  tmp_path_ = str_cat(path_, ".tmp-", ::getpid());
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_)
    fail("cannot create token shard '", tmp_path_, "': ", std::strerror(errno),
         " (does the output folder exist and is it writable?)");
  unsigned char zeros[kShardHeaderBytes] = {};
  write_raw(zeros, sizeof zeros);  // the real header is written by finish()
}

ShardWriter::~ShardWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void ShardWriter::write_raw(const void* data, size_t bytes) {
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes)
    fail("writing token shard '", tmp_path_, "': ", std::strerror(errno), " (disk full?)");
}

void ShardWriter::add_document(std::span<const int32_t> ids, bool add_bos,
                               std::span<const uint8_t> mask) {
  GEMMAX_CHECK(file_, "token shard '", path_, "': add_document after finish");
  GEMMAX_CHECK(mask.empty() || mask.size() == ids.size(), "token shard '", path_,
               "': a loss mask of ", mask.size(), " values for ", ids.size(), " ids");
  if (!mask.empty() && !masked_) {  // the documents so far count whole
    masked_ = true;
    mask_.assign(size_t(header_.num_tokens), 1);
  }
  const bool masked = masked_;
  std::vector<uint32_t> buf;
  buf.reserve(ids.size() + 2);
  if (add_bos && header_.bos_id != kShardNoId) {
    buf.push_back(header_.bos_id);
    if (masked) mask_.push_back(mask.empty() ? 1 : 0);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || int64_t(id) >= int64_t(header_.vocab_size))
      fail("token shard '", path_, "': document ", header_.num_documents, ", token ", i, ": id ",
           id, " is outside the tokenizer's vocabulary [0, ", header_.vocab_size, ")");
    if (uint32_t(id) == header_.eos_id)
      fail("token shard '", path_, "': document ", header_.num_documents, ", token ", i,
           " is the eos id ", id,
           "; documents are separated by eos, so a document may not contain it");
    buf.push_back(uint32_t(id));
    if (masked) mask_.push_back(mask.empty() || mask[i] != 0 ? 1 : 0);
  }
  buf.push_back(header_.eos_id);
  if (masked) mask_.push_back(mask.empty() || mask.back() != 0 ? 1 : 0);
  write_raw(buf.data(), buf.size() * sizeof(uint32_t));
  header_.num_tokens += buf.size();
  header_.num_documents += 1;
}

void ShardWriter::finish() {
  GEMMAX_CHECK(file_, "token shard '", path_, "': finish called twice");
  header_.version = masked_ ? 2 : 1;
  write_raw(mask_.data(), mask_.size());
  unsigned char buf[kShardHeaderBytes];
  encode_header(header_, buf);
  if (std::fseek(file_, 0, SEEK_SET) != 0)
    fail("seeking in '", tmp_path_, "': ", std::strerror(errno));
  write_raw(buf, sizeof buf);
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    fail("writing token shard '", tmp_path_, "': ", std::strerror(errno), " (disk full?)");
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    std::remove(tmp_path_.c_str());
    fail("writing token shard '", tmp_path_, "': ", std::strerror(errno));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_path_.c_str());
    fail("cannot rename '", tmp_path_, "' to '", path_, "': ", std::strerror(err));
  }
}

// ---- reader ---------------------------------------------------------------------------------

TokenShard::TokenShard(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open token shard '", path_, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat token shard '", path_, "': ", std::strerror(err));
  }
  const uint64_t file_bytes = uint64_t(st.st_size);
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("token shard '", path_, "' is not a regular file");
  }
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    fail("token shard '", path_, "' is ", file_bytes, " bytes, shorter than the ",
         kShardHeaderBytes,
         "-byte header: truncated, or not a gemmax token shard (make one with `gemmax tokenize`)");
  }
  map_bytes_ = size_t(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("cannot map token shard '", path_, "': ", std::strerror(map_err));
  }
  try {
    validate_header(file_bytes);
  } catch (...) {
    ::munmap(map_, map_bytes_);  // the destructor does not run for a throwing constructor
    map_ = nullptr;
    throw;
  }
}

void TokenShard::validate_header(uint64_t file_bytes) {
  const auto* bytes = static_cast<const unsigned char*>(map_);
  const std::string where = "token shard '" + path_ + "'";
  if (std::memcmp(bytes, kShardMagic, 8) != 0)
    fail(where, ": field magic: expected \"GMXTOKEN\", got ", show_bytes(bytes, 8),
         ": not a gemmax token shard (make one with `gemmax tokenize`)");
  header_ = decode_header(bytes);
  if (header_.version != 1 && header_.version != 2)
    fail(where, ": field version: expected 1 or 2, got ", header_.version,
         ": written by another gemmax version; re-tokenize it with this one");
  if (header_.dtype != kShardDtypeUint32)
    fail(where, ": field dtype: expected ", kShardDtypeUint32, " (uint32 tokens), got ",
         header_.dtype, ": unknown token type; re-tokenize it with this gemmax");
  if (header_.vocab_size == 0 || header_.vocab_size == kShardNoId)
    fail(where, ": field vocab_size: expected a value in [1, 2^32-1), got ", header_.vocab_size,
         ": corrupt header");
  if (header_.eos_id >= header_.vocab_size)
    fail(where, ": field eos_id: expected < vocab_size ", header_.vocab_size, ", got ",
         header_.eos_id, ": corrupt header");
  for (auto [name, id] : {std::pair{"bos_id", header_.bos_id}, std::pair{"pad_id", header_.pad_id}})
    if (id != kShardNoId && id >= header_.vocab_size)
      fail(where, ": field ", name, ": expected < vocab_size ", header_.vocab_size,
           " or 0xFFFFFFFF (none), got ", id, ": corrupt header");
  const uint64_t per_token = header_.version == 2 ? 5 : 4;  // version 2: + a loss-mask byte
  const uint64_t max_tokens = (UINT64_MAX - kShardHeaderBytes) / per_token;
  if (header_.num_tokens > max_tokens)
    fail(where, ": field num_tokens: ", header_.num_tokens, " is impossibly large: corrupt header");
  const uint64_t expected = kShardHeaderBytes + per_token * header_.num_tokens;
  if (file_bytes < expected)
    fail(where, " is truncated: field num_tokens says ", header_.num_tokens,
         " tokens, so expected ", expected, " bytes (version ", header_.version, "), got ",
         file_bytes, " (", (file_bytes - kShardHeaderBytes) / per_token,
         " tokens); the write was cut short: re-tokenize it");
  if (file_bytes > expected)
    fail(where, ": token count mismatch: field num_tokens says ", header_.num_tokens,
         " tokens, so expected ", expected, " bytes, got ", file_bytes, " (", file_bytes - expected,
         " bytes too many): corrupt shard; re-tokenize it");
  if (header_.num_documents > header_.num_tokens)
    fail(where, ": field num_documents: expected at most num_tokens ", header_.num_tokens, ", got ",
         header_.num_documents, ": corrupt header");
  tokens_ = reinterpret_cast<const uint32_t*>(bytes + kShardHeaderBytes);
  if (header_.version == 2) mask_ = bytes + kShardHeaderBytes + 4 * header_.num_tokens;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

void TokenShard::validate_tokens(int64_t model_vocab_size) const {
  check_token_ids("token shard '" + path_ + "'", tokens(), model_vocab_size, header_.vocab_size);
  const std::string where = "token shard '" + path_ + "'";
  uint64_t eos = 0;
  for (uint32_t t : tokens()) eos += (t == header_.eos_id);
  if (eos != header_.num_documents)
    fail(where, ": document count mismatch: field num_documents says ", header_.num_documents,
         ", but the tokens hold ", eos, " eos (id ", header_.eos_id,
         ") tokens: corrupt shard; re-tokenize it");
  if (header_.num_tokens > 0 && tokens_[header_.num_tokens - 1] != header_.eos_id)
    fail(where, ": the last token is ", tokens_[header_.num_tokens - 1], ", not eos (id ",
         header_.eos_id, "): the last document is cut off; re-tokenize it");
  const std::span<const uint8_t> mask = loss_mask();
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] > 1)
      fail(where, ": loss mask of token ", i, " is ", int(mask[i]),
           ", expected 0 or 1: corrupt shard; re-tokenize it");
}

void check_token_ids(std::string_view what, std::span<const uint32_t> ids, int64_t vocab_size,
                     int64_t writer_vocab) {
  // One branch-free pass for the common (valid) case; locate the culprit only on failure.
  uint32_t max_id = 0;
  for (uint32_t t : ids) max_id = t > max_id ? t : max_id;
  if (ids.empty() || int64_t(max_id) < vocab_size) {
    if (writer_vocab > vocab_size)
      fail(what, ": its tokenizer's vocabulary (", writer_vocab,
           " ids) is larger than the model's (vocab_size ", vocab_size,
           "), so it is not the model's tokenizer, even where these ids happen to fit; use the "
           "model's tokenizer (re-tokenize shards with it), or a model whose vocab_size covers "
           "the tokenizer's");
    return;
  }
  size_t i = 0;
  while (int64_t(ids[i]) < vocab_size) ++i;
  std::string writer;
  if (writer_vocab > 0) writer = str_cat(" (its tokenizer has vocabulary size ", writer_vocab, ")");
  fail(what, ": token ", i, " has id ", ids[i], ", outside the model's vocabulary (vocab_size ",
       vocab_size, ")", writer,
       ": the tokenizer does not match the model; use the model's tokenizer (re-tokenize "
       "shards with it), or a model whose vocab_size covers the tokenizer's");
}

}  // namespace gemmax
