#include "tests/frozen_postgres.h"

#include <dirent.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace verity::tests {

FrozenPostgres::FrozenPostgres(const std::string& pgdata) {
  std::ifstream pid_file(pgdata + "/postmaster.pid");
  pid_t postmaster = 0;
  pid_file >> postmaster;
  if (postmaster <= 0 || kill(postmaster, SIGSTOP) != 0) return;
  stopped_.push_back(postmaster);
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm has no ')' for postgres.
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    pid_t ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == postmaster && kill(pid, SIGSTOP) == 0) stopped_.push_back(pid);
  }
  closedir(proc);
}

void FrozenPostgres::Thaw() {
  for (pid_t pid : stopped_) kill(pid, SIGCONT);
  stopped_.clear();
}

}  // namespace verity::tests
