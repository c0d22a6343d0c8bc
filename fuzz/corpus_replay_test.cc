// Replays every input of fuzz/regressions/ (inputs that once made the fuzzer fail), fuzz/seeds/
// and fuzz/corpus/ through the fuzz target, built here with the ordinary toolchain and no
// sanitizers. The target aborts on a crash or on a broken invariant (see
// request_validation_fuzzer.cc), which fails this test; the input is named on stderr.
#include <dirent.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace verity::fuzz {
namespace {

// The input being replayed, for the SIGABRT handler.
const char* current_input = "";

void NameInputOnAbort(int) {
  const char prefix[] = "\nreplay aborted on input: ";
  (void)!write(2, prefix, sizeof(prefix) - 1);
  (void)!write(2, current_input, std::strlen(current_input));
  (void)!write(2, "\n", 1);
}

std::string RunfilesDir(const std::string& path_in_workspace) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return path_in_workspace;
  return std::string(srcdir) + "/" + (workspace != nullptr ? workspace : "verity") + "/" +
         path_in_workspace;
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* entry = readdir(d)) {
    if (entry->d_name[0] != '.') files.push_back(dir + "/" + entry->d_name);
  }
  closedir(d);
  return files;
}

// Replays the inputs of `dir`; returns how many there were.
size_t Replay(const std::string& dir) {
  std::vector<std::string> files = FilesIn(RunfilesDir(dir));
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string input = bytes.str();
    current_input = file.c_str();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  current_input = "";
  return files.size();
}

class CorpusReplayTest : public ::testing::Test {
 protected:
  void SetUp() override { std::signal(SIGABRT, NameInputOnAbort); }
  void TearDown() override { std::signal(SIGABRT, SIG_DFL); }
};

TEST_F(CorpusReplayTest, RegressionInputsPass) { EXPECT_GE(Replay("fuzz/regressions"), 2u); }

TEST_F(CorpusReplayTest, SeedsPass) { EXPECT_GE(Replay("fuzz/seeds"), 10u); }

TEST_F(CorpusReplayTest, CorpusPasses) { EXPECT_GT(Replay("fuzz/corpus"), 0u); }

}  // namespace
}  // namespace verity::fuzz
