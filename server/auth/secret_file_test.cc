#include "server/auth/secret_file.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace verity::server {
namespace {

std::string MakeTempDir() {
  std::string pattern = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                                                : "/tmp") +
                        "/secret-file-XXXXXX";
  return ::mkdtemp(pattern.data()) == nullptr ? "" : pattern;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteWithMode(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

mode_t ModeOf(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode;
}

TEST(SecretFileTest, ANewFileIsOwnerOnly) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(WriteSecretFile(dir + "/admin.key", "vk_secret").ok());
  EXPECT_EQ(Read(dir + "/admin.key"), "vk_secret\n");
  EXPECT_EQ(ModeOf(dir + "/admin.key") & 0777, 0600);
}

TEST(SecretFileTest, APlantedTempSymlinkIsNotFollowed) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  // Someone who can write the directory points admin.key.tmp at a file they can read.
  WriteWithMode(dir + "/readable", "theirs\n", 0644);
  ASSERT_EQ(::symlink((dir + "/readable").c_str(), (dir + "/admin.key.tmp").c_str()), 0);
  ASSERT_TRUE(WriteSecretFile(dir + "/admin.key", "vk_secret").ok());
  EXPECT_EQ(Read(dir + "/readable"), "theirs\n") << "the secret went through the symlink";
  EXPECT_EQ(ModeOf(dir + "/readable") & 0777, 0644);
  EXPECT_TRUE(S_ISREG(ModeOf(dir + "/admin.key")));
  EXPECT_EQ(ModeOf(dir + "/admin.key") & 0777, 0600);
  EXPECT_EQ(Read(dir + "/admin.key"), "vk_secret\n");
}

TEST(SecretFileTest, AnOldTempFileDoesNotLendItsMode) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  WriteWithMode(dir + "/admin.key.tmp", "stale\n", 0644);
  WriteWithMode(dir + "/admin.key", "old\n", 0644);
  ASSERT_TRUE(WriteSecretFile(dir + "/admin.key", "vk_secret").ok());
  EXPECT_EQ(ModeOf(dir + "/admin.key") & 0777, 0600);
  EXPECT_EQ(Read(dir + "/admin.key"), "vk_secret\n");
}

TEST(SecretFileTest, AnUnwritableDirectoryIsAClearError) {
  const absl::Status status = WriteSecretFile("/nonexistent-dir/admin.key", "vk_secret");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("/nonexistent-dir/admin.key.tmp"), absl::string_view::npos)
      << status;
}

// secret_file.h: the file is "fchmod'ed to 0600 whatever the umask" -- a umask that takes the
// owner's own bits away does not leave a key file its owner cannot read.
TEST(SecretFileTest, TheModeIs0600WhateverTheUmask) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  const mode_t old_umask = ::umask(0277);
  const absl::Status status = WriteSecretFile(dir + "/admin.key", "vk_secret");
  ::umask(old_umask);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ModeOf(dir + "/admin.key") & 0777, 0600);
  EXPECT_EQ(Read(dir + "/admin.key"), "vk_secret\n");
}

// A path without a directory is relative to the working directory (its directory is ".").
TEST(SecretFileTest, APathWithoutADirectoryIsWrittenInTheWorkingDirectory) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  char old_cwd[4096];
  ASSERT_NE(::getcwd(old_cwd, sizeof(old_cwd)), nullptr);
  ASSERT_EQ(::chdir(dir.c_str()), 0);
  const absl::Status status = WriteSecretFile("admin.key", "vk_secret");
  ASSERT_EQ(::chdir(old_cwd), 0);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(Read(dir + "/admin.key"), "vk_secret\n");
  EXPECT_EQ(ModeOf(dir + "/admin.key") & 0777, 0600);
}

// secret_file.h: "FAILED_PRECONDITION, naming the file and the reason, on any failure" -- here
// the rename: a directory (not empty) sits where the key file goes.
TEST(SecretFileTest, AFailedRenameIsAnError) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(::mkdir((dir + "/admin.key").c_str(), 0700), 0);
  WriteWithMode(dir + "/admin.key/inside", "x\n", 0600);
  const absl::Status status = WriteSecretFile(dir + "/admin.key", "vk_secret");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("rename"), absl::string_view::npos) << status;
}

// secret_file.h: "FAILED_PRECONDITION, naming the file and the reason, on any failure" -- here
// the write (the file-size limit lets it write nothing). No key file appears, and the temporary
// that was to hold the secret is not left behind.
TEST(SecretFileTest, AFailedWriteIsAnErrorAndLeavesNoFileBehind) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit no_bytes = old_limit;
  no_bytes.rlim_cur = 0;
  void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal.
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &no_bytes), 0);
  const absl::Status status = WriteSecretFile(dir + "/admin.key", "vk_secret");
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find(dir + "/admin.key.tmp"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("write"), absl::string_view::npos) << status;
  EXPECT_NE(::access((dir + "/admin.key").c_str(), F_OK), 0);
  EXPECT_NE(::access((dir + "/admin.key.tmp").c_str(), F_OK), 0) << "the secret was left behind";
}

}  // namespace
}  // namespace verity::server
