#include "tests/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace verity::tests {

std::string RunfilePath(const std::string& path_in_workspace) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return path_in_workspace;
  return absl::StrCat(srcdir, "/", workspace != nullptr ? workspace : "verity", "/",
                      path_in_workspace);
}

std::string MakeTempDir(const std::string& prefix) {
  std::string pattern = absl::StrCat("/tmp/", prefix, "-XXXXXX");
  char* made = mkdtemp(pattern.data());
  if (made == nullptr) return "";
  chmod(made, 0755);
  return made;
}

void RemoveTree(const std::string& path) {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

ServerProcess::ServerProcess(std::string binary, std::string data_dir,
                             std::vector<std::string> extra_flags)
    : binary_(std::move(binary)),
      data_dir_(std::move(data_dir)),
      extra_flags_(std::move(extra_flags)) {}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Stop().IgnoreError();
}

absl::Status ServerProcess::Start(absl::Duration timeout) {
  return StartAndWait(timeout, /*until_loaded=*/true);
}

absl::Status ServerProcess::StartListening(absl::Duration timeout) {
  return StartAndWait(timeout, /*until_loaded=*/false);
}

absl::Status ServerProcess::StartAndWait(absl::Duration timeout, bool until_loaded) {
  ++starts_;
  // A fresh log per start, so the port line read is this start's.
  const std::string log = log_path();
  std::filesystem::remove(log);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDERR_FILENO);
      dup2(fd, STDOUT_FILENO);
    }
    std::vector<std::string> args = {binary_, "--listen=127.0.0.1:0",
                                     "--data_dir=" + data_dir_ + "/var",
                                     "--background_refit=false"};
    args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(binary_.c_str(), argv.data());
    _exit(127);
  }
  pid_ = pid;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream in(log);
      std::stringstream text;
      text << in.rdbuf();
      return absl::InternalError(absl::StrCat("verity_server exited during start-up:\n", text.str()));
    }
    std::ifstream in(log);
    std::string line;
    bool listening = false;
    // Before event=listening when the server loads every project first (--load_threads=0).
    bool loaded = false;
    while (std::getline(in, line)) {
      loaded = loaded || absl::StrContains(line, "event=projects_loaded");
      if (!absl::StrContains(line, "event=listening")) continue;
      size_t at = line.find(" port=");
      if (at == std::string::npos) continue;
      std::string rest = line.substr(at + 6);
      rest = rest.substr(0, rest.find(' '));
      listening = absl::SimpleAtoi(rest, &port_) && port_ > 0;
    }
    if (listening && (loaded || !until_loaded)) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Kill();
  return absl::DeadlineExceededError(until_loaded
                                         ? "verity_server did not listen and load its projects in time"
                                         : "verity_server did not start listening in time");
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

absl::Status ServerProcess::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("verity_server exited with status ", status));
}

}  // namespace verity::tests
