// Progress lines: what a terminal and a log see, the rate and time-left arithmetic on a fake
// clock, and the long commands reporting through the binary.
#include "gemmax/base/progress.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::run_command;
using testing::TempDir;

struct FakeOutput {
  std::ostringstream text;
  double now = 100;  // any origin
  ProgressOutput output(bool terminal, double first_after, double period) {
    ProgressOutput o;
    o.out = &text;
    o.terminal = terminal;
    o.first_after = first_after;
    o.period = period;
    o.clock = [this] { return now; };
    return o;
  }
};

TEST(Progress, PlainLinesAtTheirPeriodWithRateAndTimeLeft) {
  FakeOutput f;
  Progress p("reading", 1000, "bytes", f.output(false, 10, 10));
  f.now += 5;
  p.add(100);
  EXPECT_EQ(f.text.str(), "") << "nothing before the first line is due";
  f.now += 5;  // t = 10 s: 250 of 1000 bytes -> 25 B/s, 750 bytes left -> 30 s
  p.add(150);
  EXPECT_EQ(f.text.str(), "gemmax: reading: 250 B / 1000 B (25%) | 25 B/s | 30 s left\n");
  f.now += 9;
  p.add(50);
  EXPECT_EQ(f.text.str(), "gemmax: reading: 250 B / 1000 B (25%) | 25 B/s | 30 s left\n")
      << "the next line waits for the period";
  f.now += 1;  // t = 20 s: 300 bytes -> 15 B/s, 700 left -> 46.7 s
  p.add(0);
  EXPECT_NE(f.text.str().find("\ngemmax: reading: 300 B / 1000 B (30%) | 15 B/s | 47 s left\n"),
            std::string::npos)
      << f.text.str();
  f.now += 20;  // t = 40 s
  p.set(1000);
  f.text.str("");
  p.finish();
  EXPECT_EQ(f.text.str(), "gemmax: reading: 1000 B in 40 s (25 B/s)\n");
  p.finish();
  EXPECT_EQ(f.text.str(), "gemmax: reading: 1000 B in 40 s (25 B/s)\n") << "finish is once";
}

TEST(Progress, CountsLargeAmountsAndUnknownTotals) {
  FakeOutput f;
  Progress p("prefill", 0, "tokens", f.output(false, 0, 0));
  f.now += 4;
  p.add(2.5e6);
  EXPECT_EQ(f.text.str(), "gemmax: prefill: 2.50M tokens | 625.00K tokens/s\n")
      << "no total: no percentage, no time left";
  FakeOutput g;
  Progress q("writing", 8.0 * (1ull << 30), "bytes", g.output(false, 0, 0));
  g.now += 100;
  q.add(2.0 * (1ull << 30));
  EXPECT_EQ(g.text.str(),
            "gemmax: writing: 2.00 GiB / 8.00 GiB (25%) | 20.48 MiB/s | 5 min 00 s left\n");
}

TEST(Progress, QuickOperationsPrintNothing) {
  FakeOutput f;
  {
    Progress p("tokenize", 10, "bytes", f.output(false, 10, 10));
    f.now += 9.9;
    p.add(10);
    p.finish();
  }
  FakeOutput t;
  {
    Progress p("tokenize", 10, "bytes", t.output(true, 1, 0.25));
    p.add(10);
    p.finish();
  }
  EXPECT_EQ(f.text.str() + t.text.str(), "");
}

TEST(Progress, TerminalRedrawsOneLine) {
  FakeOutput f;
  Progress p("loading", 100, "tensors", f.output(true, 1, 0.25));
  f.now += 1;
  p.add(10);  // 10 tensors/s, 90 left -> 9.0 s
  const std::string first = "gemmax: loading: 10 / 100 tensors (10%) | 10 tensors/s | 9.0 s left";
  EXPECT_EQ(f.text.str(), "\r" + first);
  f.now += 0.1;
  p.add(1);
  EXPECT_EQ(f.text.str(), "\r" + first) << "redraws are at most 4 per second";
  f.now += 0.9;  // t = 2 s: 50 tensors -> 25 tensors/s, 50 left -> 2.0 s
  p.add(39);
  const std::string second = "gemmax: loading: 50 / 100 tensors (50%) | 25 tensors/s | 2.0 s left";
  EXPECT_EQ(f.text.str(), "\r" + first + "\r" + second);
  f.now += 2;  // t = 4 s: done
  p.set(100);
  const std::string third = "gemmax: loading: 100 / 100 tensors (100%) | 25 tensors/s";
  ASSERT_LT(third.size(), second.size());
  EXPECT_EQ(f.text.str(), "\r" + first + "\r" + second + "\r" + third +
                              std::string(second.size() - third.size(), ' '));
  f.text.str("");
  p.finish();
  // The shorter final line blanks what remains of the longer one, and ends the line.
  const std::string last = "gemmax: loading: 100 tensors in 4.0 s (25 tensors/s)";
  ASSERT_LT(last.size(), third.size());
  EXPECT_EQ(f.text.str(), "\r" + last + std::string(third.size() - last.size(), ' ') + "\n");
}

TEST(Progress, AFailedOperationOnlyEndsTheTerminalLine) {
  FakeOutput f;
  {
    Progress p("writing", 100, "bytes", f.output(true, 0, 0.25));
    f.now += 1;
    p.add(10);
  }  // no finish(): the operation threw
  const std::string text = f.text.str();
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find(" in "), std::string::npos) << "it claims no completion: " << text;
}

TEST(Progress, Durations) {
  EXPECT_EQ(format_duration(0.44), "0.4 s");
  EXPECT_EQ(format_duration(12.4), "12 s");
  EXPECT_EQ(format_duration(185), "3 min 05 s");
  EXPECT_EQ(format_duration(3599.7), "1 h 00 min");
  EXPECT_EQ(format_duration(2 * 3600 + 10 * 60 + 20), "2 h 10 min");
}

// Through the binary, stderr not a terminal: plain lines when GEMMAX_PROGRESS_SECONDS allows
// (0: at every update), none for a quick command by default.
TEST(Progress, LongCommandsReportProgress) {
  const std::string bin = GEMMAX_BINARY;
  TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i) text += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  ASSERT_LT(text.size(), 1024u) << "the test reads the size in bytes";
  testing::write_file(dir / "a.jsonl", text);
  const std::string tokenize = bin + " tokenize --out " + dir / "a.bin" + " " + dir / "a.jsonl";
  std::string out;
  ASSERT_EQ(run_command("GEMMAX_PROGRESS_SECONDS=0 " + tokenize, &out), 0) << out;
  EXPECT_NE(out.find("gemmax: tokenize: "), std::string::npos) << out;
  EXPECT_NE(out.find(" left\n"), std::string::npos) << out;
  EXPECT_NE(out.find("gemmax: tokenize: " + std::to_string(text.size()) + " B in "),
            std::string::npos)
      << out;
  out.clear();
  ASSERT_EQ(run_command("env -u GEMMAX_PROGRESS_SECONDS " + tokenize, &out), 0) << out;
  EXPECT_EQ(out.find("gemmax: tokenize"), std::string::npos) << "quick: no progress\n" << out;
  out.clear();
  EXPECT_NE(run_command("GEMMAX_PROGRESS_SECONDS=soon " + tokenize, &out), 0);
  EXPECT_NE(out.find("GEMMAX_PROGRESS_SECONDS='soon'"), std::string::npos) << out;

  // export: reading the checkpoint, converting, writing.
  {
    Trainer t(
        Config::defaults({"base_output_directory=" + dir.str(), "run_name=r", "base_emb_dim=32",
                          "max_target_length=32", "steps=1", "sample_max_new_tokens=0"}));
    std::ostringstream log;
    t.run(log);
  }
  out.clear();
  ASSERT_EQ(run_command("GEMMAX_PROGRESS_SECONDS=0 " + bin + " export --checkpoint " + dir / "r" +
                            " --out " + dir / "hf",
                        &out),
            0)
      << out;
  for (const char* what : {"gemmax: checking ", "gemmax: loading ",
                           "gemmax: converting to bfloat16: ", "gemmax: writing "})
    EXPECT_NE(out.find(what), std::string::npos) << what << "\n" << out;
  // sample: loading the Hugging Face folder, the prompt's prefill.
  out.clear();
  ASSERT_EQ(run_command("GEMMAX_PROGRESS_SECONDS=0 " + bin + " sample --model " + dir / "hf" +
                            " --prompt 'Once upon a time' --max_new_tokens 2",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("gemmax: loading " + dir / "hf"), std::string::npos) << out;
  EXPECT_NE(out.find("gemmax: prefill: 17 tokens in "), std::string::npos) << out;
}

}  // namespace
}  // namespace gemmax
