#include "server/auth/secret_file.h"

#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace
}  // namespace verity::server
