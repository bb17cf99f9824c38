#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "gemmax/base/convert.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/safetensors.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;
using testing::random_bytes;
using testing::read_file;
using testing::TempDir;
using testing::write_file;


bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A file made by hand: 8-byte length, header text, data bytes.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST(Safetensors, RoundTripEveryDtypeBitExact) {
  TempDir dir;
  const DType all[] = {DType::F32, DType::F64, DType::BF16, DType::F16,
                       DType::I32, DType::I64, DType::U8};
  NamedTensors ts;
  uint32_t seed = 1;
  for (DType d : all) {
    ts.emplace_back(std::string("t.") + std::string(dtype_name(d)),
                    random_bytes({3, 5}, d, seed++));
    ts.emplace_back(std::string("odd.") + std::string(dtype_name(d)),
                    random_bytes({7}, d, seed++));
  }
  ts.emplace_back("scalar", random_bytes({}, DType::F32, 99));
  ts.emplace_back("empty", Tensor::empty({0, 4}, DType::BF16));
  const std::string path = dir / "all.safetensors";
  write_safetensors(path, ts, {{"format", "pt"}, {"note", "héllo"}});

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.entries().size(), ts.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "héllo");
  for (const auto& [name, t] : ts) {
    ASSERT_TRUE(f.has(name)) << name;
    EXPECT_EQ(f.entry(name).dtype, t.dtype());
    EXPECT_EQ(f.entry(name).shape, t.shape());
    const Tensor v = f.tensor(name);
    EXPECT_TRUE(same_bytes(v, t)) << name;
    if (t.numel() > 0)  // aligned views straight into the mapping
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.raw()) % dtype_size(t.dtype()), 0u) << name;
  }
  EXPECT_FALSE(f.has("nope"));
  expect_error([&] { f.tensor("nope"); }, {path, "nope"});
}

TEST(Safetensors, ViewOutlivesFileObjectAndReadAsConverts) {
  TempDir dir;
  Tensor src = Tensor::empty({4}, DType::F32);
  for (int i = 0; i < 4; ++i) src.data<float>()[i] = 0.5f * float(i) - 1.0f;
  const std::string path = dir / "w.safetensors";
  write_safetensors(path, {{"w", src}});
  Tensor view;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    view = f.tensor("w");
    Tensor b = f.read_as("w", DType::BF16, MemKind::Params);
    EXPECT_EQ(b.dtype(), DType::BF16);
    EXPECT_EQ(b.mem_kind(), MemKind::Params);
    EXPECT_EQ(float(b.data<bf16>()[3]), 0.5f);
    Tensor d = f.read_as("w", DType::F64);
    EXPECT_EQ(d.data<double>()[0], -1.0);
    expect_error([&] { f.read_as("w", DType::I32); }, {path, "'w'", "int32"});
  }
  EXPECT_EQ(view.data<float>()[2], 0.0f);  // the mapping is still alive
  EXPECT_TRUE(same_bytes(view, src));
}

// Byte-exact agreement with the safetensors library (its tests test_serialization and
// test_empty pin these bytes).
TEST(Safetensors, MatchesLibraryBytes) {
  TempDir dir;
  Tensor t = Tensor::empty({1, 2, 3}, DType::F32);
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = float(i);
  write_safetensors(dir / "a", {{"attn.0", t}});
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);  // already a multiple of 8: no padding
  std::string data(24, '\0');
  std::memcpy(data.data(), t.raw(), 24);
  EXPECT_EQ(read_file(dir / "a"), raw_file(header, data));

  write_safetensors(dir / "b", {});
  EXPECT_EQ(read_file(dir / "b"), raw_file("{}      ", ""));
  write_safetensors(dir / "c", {}, {{"framework", "pt"}});
  EXPECT_EQ(read_file(dir / "c"), raw_file(R"({"__metadata__":{"framework":"pt"}}     )", ""));
}

TEST(Safetensors, HeaderOrderAndPaddingFollowLibrary) {
  TempDir dir;
  NamedTensors ts = {
      {"b_u8", random_bytes({3}, DType::U8, 1)},   {"a_bf16", random_bytes({3}, DType::BF16, 2)},
      {"z_f32", random_bytes({1}, DType::F32, 3)}, {"y_f32", random_bytes({1}, DType::F32, 4)},
      {"c_i64", random_bytes({1}, DType::I64, 5)}, {"d_f64", random_bytes({1}, DType::F64, 6)}};
  std::vector<size_t> order;
  const std::string h = safetensors_header(ts, {{"k", "v"}}, &order);
  EXPECT_EQ(h.size() % 8, 0u);
  // Largest alignment first (I64, F64, F32, BF16, U8), then by name.
  std::vector<std::string> names;
  for (size_t i : order) names.push_back(ts[i].first);
  EXPECT_EQ(names,
            (std::vector<std::string>{"c_i64", "d_f64", "y_f32", "z_f32", "a_bf16", "b_u8"}));
  EXPECT_EQ(h.rfind(R"({"__metadata__":{"k":"v"},"c_i64":{"dtype":"I64","shape":[1],)"
                    R"("data_offsets":[0,8]},"d_f64":)",
                    0),
            0u)
      << h;
  const std::string path = dir / "o.safetensors";
  write_safetensors(path, ts, {{"k", "v"}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.data_offset(), 8 + h.size());
  names.clear();
  for (const auto& e : f.entries()) names.push_back(e.name);  // data order
  EXPECT_EQ(names,
            (std::vector<std::string>{"c_i64", "d_f64", "y_f32", "z_f32", "a_bf16", "b_u8"}));
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const Tensor t = Tensor::zeros({2}, DType::F32);
  expect_error([&] { write_safetensors(dir / "x", {{"a", t}, {"a", t}}); }, {"'a'", "twice"});
  expect_error([&] { write_safetensors(dir / "x", {{"__metadata__", t}}); }, {"__metadata__"});
  expect_error([&] { write_safetensors(dir / "x", {{"u", Tensor()}}); }, {"'u'", "undefined"});
  EXPECT_TRUE(dir.list().empty());
}

TEST(Safetensors, DiskFullLeavesPreviousFileIntact) {
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  write_safetensors(path, {{"a", random_bytes({16}, DType::F32, 1)}});
  const std::string before = read_file(path);
  {
    testing::FileSizeLimit limit(100);  // the write fails as on a full disk
    expect_error(
        [&] {
          write_safetensors(path, {{"a", random_bytes({1024}, DType::F32, 2)}});
        },
        {path, "File too large"});
  }
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
  SafetensorsFile::open(path);  // still valid
}

// ---- hand-made bad files: each must be a clear error, never a crash or silent zero ----

class BadFile : public ::testing::Test {
 protected:
  void expect_open_error(const std::string& bytes, const std::vector<std::string>& parts) {
    const std::string path = dir_ / "bad.safetensors";
    write_file(path, bytes);
    std::vector<std::string> all = parts;
    all.push_back(path);
    expect_error([&] { SafetensorsFile::open(path); }, all);
  }
  TempDir dir_;
};

TEST_F(BadFile, TooShortForLength) { expect_open_error("abc", {"3 bytes", "truncated"}); }

TEST_F(BadFile, MissingFile) {
  expect_error([&] { SafetensorsFile::open(dir_ / "none.safetensors"); },
               {"none.safetensors", "No such file"});
}

TEST_F(BadFile, HeaderLengthPastEof) {
  std::string f = raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd");
  f[0] = char(0x70);  // claims a longer header than the file holds
  f[1] = char(0x10);
  expect_open_error(f, {"header length 4208", "past the end"});
}

TEST_F(BadFile, InvalidJson) {
  expect_open_error(raw_file(R"({"a":{"dtype":"F32",)", ""), {"not valid JSON"});
}

TEST_F(BadFile, HeaderNotAnObject) { expect_open_error(raw_file("[1, 2]  ", ""), {"JSON object"}); }

TEST_F(BadFile, UnknownDtype) {
  expect_open_error(raw_file(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}})", "xx"),
                    {"tensor 'w'", "unknown dtype \"Q7\""});
}

TEST_F(BadFile, UnsupportedDtypeIsListedButNotReadable) {
  const std::string path = dir_ / "bool.safetensors";
  write_file(path, raw_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                            std::string("\1\0\1", 3)));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.entry("m").st_dtype, "BOOL");
  EXPECT_FALSE(f.entry("m").supported);
  expect_error([&] { f.tensor("m"); }, {path, "'m'", "BOOL"});
}

TEST_F(BadFile, TruncatedData) {
  TempDir other;
  const std::string good = other / "good.safetensors";
  write_safetensors(good, {{"w", random_bytes({8}, DType::F32, 3)}});
  std::string bytes = read_file(good);
  bytes.resize(bytes.size() - 5);
  expect_open_error(bytes, {"tensor 'w'", "data_offsets [0, 32]",
                            "past the data section (27 bytes)", "truncated"});
}

TEST_F(BadFile, OffsetsMismatchShape) {
  expect_open_error(
      raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", std::string(16, 'x')),
      {"tensor 'w'", "span 12 bytes", "F32[4] needs 16 bytes"});
}

TEST_F(BadFile, OffsetsReversed) {
  expect_open_error(
      raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", std::string(16, 'x')),
      {"tensor 'w'", "begin > end"});
}

TEST_F(BadFile, OverlappingTensors) {
  expect_open_error(raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                             std::string(24, 'x')),
                    {"tensor 'b'", "overlaps tensor 'a'"});
}

TEST_F(BadFile, BadShapes) {
  expect_open_error(raw_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx"),
                    {"tensor 'w'", "non-negative integers"});
  expect_open_error(raw_file(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "xxxx"),
                    {"tensor 'w'", "non-negative integers"});
  expect_open_error(
      raw_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
               "xxxx"),
      {"tensor 'w'", "overflows"});
}

TEST_F(BadFile, MissingOrExtraFields) {
  expect_open_error(raw_file(R"({"w":{"dtype":"F32","shape":[1]}})", "xxxx"),
                    {"tensor 'w'", "missing \"data_offsets\""});
  expect_open_error(
      raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"crc":1}})", "xxxx"),
      {"tensor 'w'", "unexpected key \"crc\""});
  expect_open_error(raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "xxxx"),
                    {"tensor 'w'", "data_offsets must be [begin, end]"});
}

TEST_F(BadFile, DuplicateTensorName) {
  expect_open_error(raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                             "xx"),
                    {"duplicate key \"w\""});
}

TEST_F(BadFile, MetadataMustBeStrings) {
  expect_open_error(raw_file(R"({"__metadata__":{"step":3}})", ""),
                    {"__metadata__[\"step\"]", "must be a string"});
}

}  // namespace
}  // namespace gemmax
