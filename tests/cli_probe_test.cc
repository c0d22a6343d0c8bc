// Black-box probes of the `verity` command-line client: each test checks one promise of
// README.md, the CLI's own --help text (client/cli_commands.cc) or the client headers
// (client/csv_input.h, client/command_line.h) against a real in-process VerityServer over a real
// gRPC channel and a private PostgreSQL, through RunCli or the `verity` binary itself. Expected
// values come from the documentation and hand computation. What tests/cli_end_to_end_test.cc
// and client/cli_test.cc already check is not repeated here.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli.h"
#include "server/verity_server.h"
#include "tests/server_process.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"

namespace verity::tests {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class CliProbeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartSuite(/*auth=*/false); }
  // A private PostgreSQL and a server over it; with `auth`, authentication on (allowed on
  // loopback too), its bootstrap admin key in pg_->dir()/admin.key.
  static void StartSuite(bool auth) {
    pg_ = TestPostgres::Start("verity-cli-probe").release();
    if (pg_ == nullptr) return;
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    if (auth) {
      options.auth.enabled = true;
      options.auth.admin_key_file = pg_->dir() + "/admin.key";
    }
    auto server = server::VerityServer::Start(options);
    if (!server.ok()) {
      ADD_FAILURE() << server.status();
      return;
    }
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Shutdown();
    delete server_;
    server_ = nullptr;
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(pg_, nullptr);
    ASSERT_NE(server_, nullptr);
  }

  static std::string Address() { return absl::StrCat("127.0.0.1:", server_->port()); }

  // A project name unique to this test (the suite shares one server).
  static std::string ProjectName(const std::string& suffix = "") {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = absl::StrCat("p-", info->name(), suffix);
    return name.substr(0, 120);
  }

  // A file in the suite's directory with `text`; returns its path.
  static std::string WriteFile(const std::string& name, const std::string& text) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string path = absl::StrCat(pg_->dir(), "/", info->name(), "-", name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // RunCli with `args` and, unless they name one, --server of the suite's server.
  CliResult Run(std::vector<std::string> args) {
    if (std::none_of(args.begin(), args.end(),
                     [](const std::string& arg) { return absl::StartsWith(arg, "--server="); })) {
      args.push_back("--server=" + Address());
    }
    std::ostringstream out, err;
    int code = client::RunCli(args, out, err);
    return {code, out.str(), err.str()};
  }

  // Runs the `verity` binary with `args` as given, stdin /dev/null, stdout and stderr to files
  // (not a terminal), VERITY_API_KEY removed from its environment. With `stderr_on_a_terminal`,
  // stderr is the slave side of a fresh pseudo-terminal, and `err` what was read from it.
  CliResult RunBinary(const std::vector<std::string>& args, bool stderr_on_a_terminal = false,
                      const std::optional<std::string>& api_key = std::nullopt) {
    const std::string binary = RunfilePath("client/verity");
    std::vector<std::string> argv_text = {binary};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** variable = environ; *variable != nullptr; ++variable) {
      if (!absl::StartsWith(*variable, "VERITY_API_KEY=")) env_text.push_back(*variable);
    }
    if (api_key.has_value()) env_text.push_back("VERITY_API_KEY=" + *api_key);
    std::vector<char*> argv, envp;
    for (std::string& arg : argv_text) argv.push_back(arg.data());
    for (std::string& variable : env_text) envp.push_back(variable.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const std::string out_path = WriteFile("verity.out", "");
    const std::string err_path = WriteFile("verity.err", "");
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, out_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int master = -1;
    if (stderr_on_a_terminal) {
      master = posix_openpt(O_RDWR | O_NOCTTY);
      if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
        return {-1, "", "cannot open a pseudo-terminal"};
      }
      posix_spawn_file_actions_addopen(&files, STDERR_FILENO, ptsname(master), O_RDWR, 0);
    } else {
      posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0600);
    }
    pid_t pid = -1;
    const int spawned =
        posix_spawn(&pid, binary.c_str(), &files, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&files);
    if (spawned != 0) return {-1, "", absl::StrCat("cannot run ", binary)};
    std::string terminal;
    int status = 0;
    if (master >= 0) {
      // Drain the terminal while the child runs (a full one would block it).
      fcntl(master, F_SETFL, O_NONBLOCK);
      char buffer[4096];
      bool exited = false;
      while (true) {
        const ssize_t n = read(master, buffer, sizeof(buffer));
        if (n > 0) {
          terminal.append(buffer, n);
          continue;
        }
        if (exited) break;
        if (waitpid(pid, &status, WNOHANG) == pid) {
          exited = true;
          continue;
        }
        usleep(5000);
      }
      close(master);
    } else {
      // Waits at most a minute: a hung client is a failure, not a hung test.
      int waited_ms = 0;
      while (waitpid(pid, &status, WNOHANG) != pid) {
        if (waited_ms >= 60000) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          return {-1, ReadText(out_path), "still running after 60 s: " + ReadText(err_path)};
        }
        usleep(10000);
        waited_ms += 10;
      }
    }
    if (!WIFEXITED(status)) {
      return {-1, "", absl::StrCat(binary, " did not exit normally (status ", status, ")")};
    }
    return {WEXITSTATUS(status), ReadText(out_path), master >= 0 ? terminal : ReadText(err_path)};
  }

  // Creates the test's project with `classes` (and `extra` flags); a test failure otherwise.
  void Create(const std::string& project, const std::string& classes,
              std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"project", "create", project, "--classes=" + classes};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult created = Run(args);
    ASSERT_EQ(created.code, 0) << created.err;
  }

  // Submits a labels CSV of `text`; a test failure unless it exits 0.
  CliResult Submit(const std::string& project, const std::string& text) {
    CliResult submitted =
        Run({"submit", "--project=" + project, "--csv=" + WriteFile("labels.csv", text)});
    EXPECT_EQ(submitted.code, 0) << submitted.err;
    return submitted;
  }

  // 127.0.0.1 and a port nobody listens on: bound, then closed.
  static std::string DeadAddress() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot find a free port";
    }
    const int port = ntohs(address.sin_port);
    close(fd);
    return absl::StrCat("127.0.0.1:", port);
  }

  static TestPostgres* pg_;
  static server::VerityServer* server_;
};

TestPostgres* CliProbeTest::pg_ = nullptr;
server::VerityServer* CliProbeTest::server_ = nullptr;

// ---------------------------------------------------------------------------
// submit

// `verity submit --help`: "label is a class name of the project, or a class index if it is not
// a class name". With classes "1,0", the label "1" is the class named 1 (index 0), not index 1;
// "0" is the class named 0 (index 1); the label "x" is neither.
TEST_F(CliProbeTest, SubmitReadsALabelAsAClassNameBeforeAnIndex) {
  const std::string p = ProjectName();
  Create(p, "1,0", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,1\ni2,a,0\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p, "--output=json"});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  std::vector<std::string> lines = Lines(posteriors.out);
  ASSERT_EQ(lines.size(), 4u) << posteriors.out;
  EXPECT_THAT(lines[1], StartsWith("{\"item\":\"i1\",\"label\":\"1\",\"label_index\":0,"));
  EXPECT_THAT(lines[2], StartsWith("{\"item\":\"i2\",\"label\":\"0\",\"label_index\":1,"));
}

// `verity submit --help`: "... or a class index if it is not a class name" — an index given for
// a project whose class names are words.
TEST_F(CliProbeTest, SubmitTakesAClassIndexThatIsNotAClassName) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  CliResult submitted = Submit(p, "item,annotator,label\ni1,a,1\ni1,b,dog\n");
  EXPECT_EQ(submitted.out, "accepted=2 duplicate=0 revised=0 stale=0 rejected=0\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_THAT(posteriors.out, HasSubstr("\ni1,dog,"));
}

// `verity submit --help`: "Prints accepted=N duplicate=N revised=N stale=N rejected=N". A
// second file changing one of two labels: 1 revised, 1 duplicate.
TEST_F(CliProbeTest, SubmitCountsARevisedLabelOnTheRealServer) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,cat\n");
  CliResult again = Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,dog\n");
  EXPECT_EQ(again.out, "accepted=0 duplicate=1 revised=1 stale=0 rejected=0\n");
}

// `verity submit --help`: "--batch_size=N Labels per batch, 1 to 10000" and `verity --help`:
// "Exit status: ... 2 a usage error." Batches of one label give the same counts.
TEST_F(CliProbeTest, SubmitBatchSizeIsOneTo10000) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string csv =
      WriteFile("l.csv", "item,annotator,label\ni1,a,cat\ni2,a,dog\ni3,b,cat\n");
  for (const std::string bad : {"0", "10001"}) {
    CliResult refused = Run({"submit", "--project=" + p, "--csv=" + csv, "--batch_size=" + bad});
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.err;
    EXPECT_THAT(refused.err, HasSubstr("--batch_size")) << bad;
  }
  CliResult ones = Run({"submit", "--project=" + p, "--csv=" + csv, "--batch_size=1"});
  ASSERT_EQ(ones.code, 0) << ones.err;
  EXPECT_EQ(ones.out, "accepted=3 duplicate=0 revised=0 stale=0 rejected=0\n");
}

// `verity submit --help`: "exits 0 even if some labels were rejected", with --output=json
// "\"rejections\": [{\"line\", \"item\", \"annotator\", \"reason\"}]". An item id of 300 bytes is
// past docs/SECURITY.md's "Ids, project names, class names | 256, 128, 128 bytes"; it is line 3.
TEST_F(CliProbeTest, SubmitExitsZeroWithARejectionNamingItsLine) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string long_id(300, 'x');
  const std::string csv =
      WriteFile("l.csv", "item,annotator,label\ni1,a,cat\n" + long_id + ",a,dog\ni2,a,dog\n");
  CliResult submitted = Run({"submit", "--project=" + p, "--csv=" + csv, "--output=json"});
  EXPECT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_THAT(submitted.out, HasSubstr("\"accepted\":2"));
  EXPECT_THAT(submitted.out, HasSubstr("\"rejected\":1"));
  EXPECT_THAT(submitted.out, HasSubstr("\"line\":3"));
}

// client/csv_input.h: "Errors are INVALID_ARGUMENT and begin with \"<file>: line <n>: \", naming
// the file as the caller gave it and the 1-based line of the offending record." A quoted item id
// spanning lines 2-3 (RFC 4180) puts the bad label of the next record on line 4.
TEST_F(CliProbeTest, ACsvErrorAfterAMultiLineFieldNamesTheRecordsLine) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string csv = WriteFile("l.csv", "item,annotator,label\n\"i\n1\",a,cat\ni2,a,bird\n");
  CliResult refused = Run({"submit", "--project=" + p, "--csv=" + csv});
  EXPECT_NE(refused.code, 0);
  EXPECT_THAT(refused.err, StartsWith("verity: "));
  EXPECT_THAT(refused.err, HasSubstr(csv + ": line 4: ")) << refused.err;
}

// client/csv_input.h: "a row with the wrong number of fields are INVALID_ARGUMENT" beginning with
// "<file>: line <n>: ".
TEST_F(CliProbeTest, ARowWithTooFewFieldsNamesItsLine) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string csv = WriteFile("l.csv", "item,annotator,label\ni1,a,cat\ni2,a\n");
  CliResult refused = Run({"submit", "--project=" + p, "--csv=" + csv});
  EXPECT_NE(refused.code, 0);
  EXPECT_THAT(refused.err, HasSubstr(csv + ": line 3: ")) << refused.err;
}

// client/csv_input.h: "Every CSV ... must start with a header naming its columns (in any
// order)."
TEST_F(CliProbeTest, SubmitTakesTheHeaderColumnsInAnyOrder) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  CliResult submitted = Submit(p, "label,item,annotator\ndog,i1,a\n");
  EXPECT_EQ(submitted.out, "accepted=1 duplicate=0 revised=0 stale=0 rejected=0\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_THAT(posteriors.out, HasSubstr("\ni1,dog,"));
}

// client/csv_input.h: RFC 4180 parsing; FormatCsvRecord quotes "fields that contain a comma, a
// quote, a carriage return or a line feed (RFC 4180)". An item id "a,b" goes in and comes out of
// `posteriors` as one quoted field.
TEST_F(CliProbeTest, AQuotedItemIdWithACommaRoundTripsThroughPosteriors) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\n\"a,b\",w,cat\n\"q\"\"x\"\"\",w,dog\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  std::vector<std::string> lines = Lines(posteriors.out);
  ASSERT_EQ(lines.size(), 3u) << posteriors.out;
  EXPECT_THAT(lines[1], StartsWith("\"a,b\",cat,"));
  EXPECT_THAT(lines[2], StartsWith("\"q\"\"x\"\"\",dog,"));
}

// README.md: "`submit`, `export` and `model train` show progress ... when stderr is a terminal
// and stay quiet when piped." The binary with stderr to a file prints nothing there.
TEST_F(CliProbeTest, SubmitAndExportStayQuietOnStderrWhenPiped) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  std::string text = "item,annotator,label\n";
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&text, "i", i, ",a", i % 7, ",cat\n");
  const std::string csv = WriteFile("l.csv", text);
  CliResult submitted =
      RunBinary({"submit", "--project=" + p, "--csv=" + csv, "--server=" + Address()});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=3000 duplicate=0 revised=0 stale=0 rejected=0\n");
  EXPECT_EQ(submitted.err, "");
  CliResult exported = RunBinary({"export", "--project=" + p, "--server=" + Address()});
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_EQ(Lines(exported.out).size(), 3001u);
  EXPECT_EQ(exported.err, "");
}

// README.md: "`submit`, `export` and `model train` show progress (rate, ETA or elapsed time)
// when stderr is a terminal"; `verity submit --help`: "A progress meter (count, rate, ETA) is
// drawn on stderr when it is a terminal"; client/progress.h: the meter line, e.g.
// "45,000/96,883 labels (46%)  52,310 labels/s  ETA 1s", drawn at the first update. 3,000 labels
// in batches of 1,000: the first acknowledged batch draws it.
TEST_F(CliProbeTest, SubmitDrawsAMeterWhenStderrIsATerminal) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  std::string text = "item,annotator,label\n";
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&text, "i", i, ",a", i % 7, ",cat\n");
  const std::string csv = WriteFile("l.csv", text);
  CliResult submitted =
      RunBinary({"submit", "--project=" + p, "--csv=" + csv, "--server=" + Address()}, true);
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=3000 duplicate=0 revised=0 stale=0 rejected=0\n");
  EXPECT_THAT(submitted.err, HasSubstr("/3,000 labels (")) << submitted.err;
}

// README.md: "`model train` show[s] progress (... elapsed time) when stderr is a terminal";
// client/progress.h ElapsedTicker: "the first line is drawn by the constructor, so a call that
// returns at once still shows it" — "<label> 1m05s", here 0s.
TEST_F(CliProbeTest, ModelTrainShowsElapsedTimeWhenStderrIsATerminal) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  CliResult trained =
      RunBinary({"model", "train", "--project=" + p, "--server=" + Address()}, true);
  ASSERT_EQ(trained.code, 0) << trained.err;
  EXPECT_THAT(trained.err, HasSubstr("0s")) << trained.err;
}

// `verity submit --help`: "every batch is acknowledged only once it is durable"; models of a
// partial failure (ingest.proto: a batch that "would pass one of the project's limits": "nothing
// of the batch was written"; "Resending is always safe"). With --max_labels=3 and batches of 2,
// the first batch (2 labels) is written and the second (4 > 3) refused: the command fails with
// one line (`verity --help`: exit 1, "verity: CODE: message"), the first batch stays, and once
// the limit is raised the same file resumes: 2 duplicate, 2 accepted.
TEST_F(CliProbeTest, ASubmitStoppedByALimitKeepsItsFirstBatchAndResumes) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--max_labels=3"});
  const std::string csv =
      WriteFile("l.csv", "item,annotator,label\ni1,a,cat\ni2,a,cat\ni3,a,dog\ni4,a,dog\n");
  CliResult stopped = Run({"submit", "--project=" + p, "--csv=" + csv, "--batch_size=2"});
  EXPECT_EQ(stopped.code, 1) << stopped.out;
  EXPECT_THAT(stopped.err, StartsWith("verity: RESOURCE_EXHAUSTED: "));
  EXPECT_EQ(std::count(stopped.err.begin(), stopped.err.end(), '\n'), 1) << stopped.err;
  CliResult shown = Run({"project", "show", p, "--output=json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("\"num_labels\":2"));
  ASSERT_EQ(Run({"project", "settings", p, "--max_labels=10"}).code, 0);
  CliResult resumed = Run({"submit", "--project=" + p, "--csv=" + csv, "--batch_size=2"});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(resumed.out, "accepted=2 duplicate=2 revised=0 stale=0 rejected=0\n");
}

// ---------------------------------------------------------------------------
// posteriors and export

// `verity export --help`: "A progress meter (rate, ETA) is drawn on stderr when it is a terminal
// and the export does not go to a terminal." 3,000 items in pages of 1,000.
TEST_F(CliProbeTest, ExportDrawsAMeterWhenStderrIsATerminal) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  std::string text = "item,annotator,label\n";
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&text, "i", i, ",a", i % 7, ",cat\n");
  Submit(p, text);
  CliResult exported = RunBinary({"export", "--project=" + p, "--server=" + Address()}, true);
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_EQ(Lines(exported.out).size(), 3001u);
  EXPECT_THAT(exported.err, HasSubstr("/3,000 ")) << exported.err;
}

// `verity posteriors --help`: "--out ... prints \"wrote N posteriors to FILE\"", the file holding
// the CSV (header item,label,confidence,p_<class>...,num_labels).
TEST_F(CliProbeTest, PosteriorsOutWritesTheFileAndSaysHowMany) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,dog\n");
  const std::string out = WriteFile("posteriors.csv", "old");
  CliResult written = Run({"posteriors", "--project=" + p, "--out=" + out});
  ASSERT_EQ(written.code, 0) << written.err;
  EXPECT_EQ(written.out, "wrote 2 posteriors to " + out + "\n");
  std::vector<std::string> lines = Lines(ReadText(out));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "item,label,confidence,p_cat,p_dog,num_labels");
  EXPECT_THAT(lines[1], StartsWith("i1,cat,"));
  EXPECT_THAT(lines[2], StartsWith("i2,dog,"));
}

// `verity posteriors --help`: "--page_size=N Posteriors per ListPosteriors call" and "Without
// --items, every item of the project in creation order, read page by page." Five items in pages
// of two.
TEST_F(CliProbeTest, PosteriorsReadsEveryItemPageByPageInCreationOrder) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ne,a,cat\nd,a,cat\nc,a,cat\nb,a,cat\na,a,cat\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p, "--page_size=2"});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  std::vector<std::string> lines = Lines(posteriors.out);
  ASSERT_EQ(lines.size(), 6u) << posteriors.out;
  const std::vector<std::string> order = {"e", "d", "c", "b", "a"};
  for (int i = 0; i < 5; ++i) EXPECT_THAT(lines[i + 1], StartsWith(order[i] + ",cat,"));
}

// `verity export --help`: "an item or label starting with = + - @ (a spreadsheet formula) is
// written after a ' so that spreadsheets show it as text."
TEST_F(CliProbeTest, ExportCsvQuotesFormulaLikeItemsAndLabels) {
  const std::string p = ProjectName();
  Create(p, "-no,+yes", {"--method=mv"});
  Submit(p, "item,annotator,label\n=SUM(A1),a,-no\n@x,a,+yes\nplain,a,+yes\n");
  CliResult exported = Run({"export", "--project=" + p});
  ASSERT_EQ(exported.code, 0) << exported.err;
  std::vector<std::string> lines = Lines(exported.out);
  ASSERT_EQ(lines.size(), 4u) << exported.out;
  EXPECT_THAT(lines[1], StartsWith("'=SUM(A1),'-no,0,"));
  EXPECT_THAT(lines[2], StartsWith("'@x,'+yes,1,"));
  EXPECT_THAT(lines[3], StartsWith("plain,'+yes,1,"));
}

// client/csv_input.h: SpreadsheetSafeCell — "The CLI applies it to the free-text cells it writes
// (item ids, class names)": `posteriors` CSV too.
TEST_F(CliProbeTest, PosteriorsCsvQuotesFormulaLikeItemsAndLabels) {
  const std::string p = ProjectName();
  Create(p, "-no,+yes", {"--method=mv"});
  Submit(p, "item,annotator,label\n=SUM(A1),a,-no\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  std::vector<std::string> lines = Lines(posteriors.out);
  ASSERT_EQ(lines.size(), 2u) << posteriors.out;
  EXPECT_THAT(lines[1], StartsWith("'=SUM(A1),'-no,"));
}

// README.md: "`--output=json` makes every command print one JSON document for scripts ...
// except `export` to stdout, which writes its `--format` (csv or jsonl)".
TEST_F(CliProbeTest, ExportToStdoutWritesItsFormatEvenWithOutputJson) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,dog\n");
  CliResult csv = Run({"export", "--project=" + p, "--output=json"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  std::vector<std::string> lines = Lines(csv.out);
  ASSERT_EQ(lines.size(), 3u) << csv.out;
  EXPECT_THAT(lines[0], StartsWith("item,label,label_index,confidence,"));
  CliResult jsonl = Run({"export", "--project=" + p, "--output=json", "--format=jsonl"});
  ASSERT_EQ(jsonl.code, 0) << jsonl.err;
  lines = Lines(jsonl.out);
  ASSERT_EQ(lines.size(), 2u) << jsonl.out;
  EXPECT_THAT(lines[0], StartsWith("{\"item\":\"i1\","));
  EXPECT_THAT(lines[1], StartsWith("{\"item\":\"i2\","));
}

// `verity export --help`: with --out, "\"wrote N posteriors to FILE\" is printed ({\"out\",
// \"posteriors\"} with --output=json)".
TEST_F(CliProbeTest, ExportOutWithOutputJsonPrintsOutAndCount) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,dog\ni3,a,dog\n");
  const std::string out = WriteFile("export.jsonl", "");
  CliResult written =
      Run({"export", "--project=" + p, "--format=jsonl", "--out=" + out, "--output=json"});
  ASSERT_EQ(written.code, 0) << written.err;
  EXPECT_EQ(written.out, "{\"out\":\"" + out + "\",\"posteriors\":3}\n");
  EXPECT_EQ(Lines(ReadText(out)).size(), 3u);
}

// `verity export --help`: "--format=csv|jsonl", "--page_size=N ... 1 to 10000"; `verity --help`:
// "2 a usage error".
TEST_F(CliProbeTest, ExportBadFormatOrPageSizeIsAUsageError) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  for (const std::vector<std::string>& flag : std::vector<std::vector<std::string>>{
           {"--format=xml"}, {"--page_size=0"}, {"--page_size=10001"}}) {
    std::vector<std::string> args = {"export", "--project=" + p};
    args.insert(args.end(), flag.begin(), flag.end());
    CliResult refused = Run(args);
    EXPECT_EQ(refused.code, 2) << flag[0] << ": " << refused.err;
    EXPECT_EQ(refused.out, "") << flag[0];
  }
}

// ---------------------------------------------------------------------------
// accuracy and item add

// `verity accuracy --help`: "Reads gold labels (item,label; class names or indices) ... prints
// \"accuracy=A (N gold items)\"". Majority vote of unanimous labels; gold by index 0 and 1 agrees
// with both, gold "0" for i3 (labelled dog) does not: 2 of 3.
TEST_F(CliProbeTest, AccuracyReadsGoldClassIndices) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,dog\ni3,a,dog\n");
  const std::string gold = WriteFile("gold.csv", "item,label\ni1,0\ni2,1\ni3,0\n");
  CliResult scored = Run({"accuracy", "--project=" + p, "--gold_csv=" + gold});
  ASSERT_EQ(scored.code, 0) << scored.err;
  ASSERT_THAT(scored.out, StartsWith("accuracy="));
  double value = -1;
  const std::string number = scored.out.substr(9, scored.out.find(' ') - 9);
  ASSERT_TRUE(absl::SimpleAtod(number, &value)) << scored.out;
  EXPECT_NEAR(value, 2.0 / 3.0, 1e-4) << scored.out;
  EXPECT_THAT(scored.out, HasSubstr("(3 gold items)"));
}

// `verity accuracy --help`: "Gold items without labels ... and items unknown to the project are
// skipped and counted ... With --output=json: {\"accuracy\", \"gold_items\", \"skipped\":
// {\"without_labels\", \"clamped_to_gold\", \"not_in_project\"}}". i2 was added without labels;
// ghost is unknown; i1 is scored (correct).
TEST_F(CliProbeTest, AccuracyJsonCountsTheSkippedGoldItems) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  ASSERT_EQ(
      Run({"item", "add", "--project=" + p, "--csv=" + WriteFile("items.csv", "item\ni2\n")}).code,
      0);
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  const std::string gold = WriteFile("gold.csv", "item,label\ni1,cat\ni2,dog\nghost,cat\n");
  CliResult scored = Run({"accuracy", "--project=" + p, "--gold_csv=" + gold, "--output=json"});
  ASSERT_EQ(scored.code, 0) << scored.err;
  EXPECT_THAT(scored.out, StartsWith("{\"accuracy\":1"));
  EXPECT_THAT(scored.out, HasSubstr("\"gold_items\":1"));
  EXPECT_THAT(scored.out, HasSubstr("\"without_labels\":1"));
  EXPECT_THAT(scored.out, HasSubstr("\"clamped_to_gold\":0"));
  EXPECT_THAT(scored.out, HasSubstr("\"not_in_project\":1"));
}

// `verity item add --help`: "optionally gold (or label), a class name or class index, empty for
// none"; export's is_gold column shows which items got gold. i1 gets gold by index 1 (dog)
// though its label says cat; i2's empty gold gives none.
TEST_F(CliProbeTest, ItemAddTakesGoldAsAClassIndexAndEmptyAsNone) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  CliResult added = Run({"item", "add", "--project=" + p,
                         "--csv=" + WriteFile("items.csv", "item,gold\ni1,1\ni2,\n")});
  ASSERT_EQ(added.code, 0) << added.err;
  EXPECT_EQ(added.out, "added=2 updated=0\n");
  Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,cat\n");
  CliResult exported = Run({"export", "--project=" + p});
  ASSERT_EQ(exported.code, 0) << exported.err;
  std::vector<std::string> lines = Lines(exported.out);
  ASSERT_EQ(lines.size(), 3u) << exported.out;
  EXPECT_THAT(lines[1], StartsWith("i1,dog,1,"));
  EXPECT_THAT(lines[1], testing::EndsWith(",true"));
  EXPECT_THAT(lines[2], StartsWith("i2,cat,0,"));
  EXPECT_THAT(lines[2], testing::EndsWith(",false"));
}

// `verity item add --help`: "existing items are updated. Prints added=N updated=N"; the id
// column may be named `id`.
TEST_F(CliProbeTest, ItemAddAgainUpdatesTheExistingItems) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string csv = WriteFile("items.csv", "id,priority\ni1,1\ni2,2\n");
  CliResult first = Run({"item", "add", "--project=" + p, "--csv=" + csv});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out, "added=2 updated=0\n");
  CliResult second = Run({"item", "add", "--project=" + p, "--csv=" + csv, "--output=json"});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(second.out, "{\"added\":0,\"updated\":2}\n");
}

// client/csv_input.h MergeGold: "an item of both gets the gold label of `gold` (INVALID_ARGUMENT,
// naming the line of `gold_file_name`, if `items` already gives it a different one)". i2 is line
// 3 of the gold file.
TEST_F(CliProbeTest, ConflictingGoldInBothFilesNamesTheGoldFilesLine) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string items = WriteFile("items.csv", "item,gold\ni1,cat\ni2,cat\n");
  const std::string gold = WriteFile("gold.csv", "item,label\ni1,cat\ni2,dog\n");
  CliResult refused =
      Run({"item", "add", "--project=" + p, "--csv=" + items, "--gold_csv=" + gold});
  EXPECT_NE(refused.code, 0);
  EXPECT_THAT(refused.err, HasSubstr(gold + ": line 3: ")) << refused.err;
  CliResult shown = Run({"project", "show", p, "--output=json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("\"num_items\":0"));
}

// ---------------------------------------------------------------------------
// projects

// client/csv_input.h: "a classes file (one name per line; \"\\r\\n\" line ends and blank lines
// are ignored)".
TEST_F(CliProbeTest, AClassesFileWithCrLfAndBlankLines) {
  const std::string p = ProjectName();
  const std::string file = WriteFile("classes.txt", "low\r\n\r\nmid\r\nhigh\r\n\r\n");
  CliResult created = Run({"project", "create", p, "--classes_file=" + file, "--output=json"});
  ASSERT_EQ(created.code, 0) << created.err;
  EXPECT_THAT(created.out, HasSubstr("\"classes\":[\"low\",\"mid\",\"high\"]"));
}

// client/csv_input.h ParseClassList: "Surrounding spaces are kept: a class name is exactly its
// text."
TEST_F(CliProbeTest, ClassNamesKeepTheirSurroundingSpaces) {
  const std::string p = ProjectName();
  CliResult created = Run({"project", "create", p, "--classes= a,b ", "--output=json"});
  ASSERT_EQ(created.code, 0) << created.err;
  EXPECT_THAT(created.out, HasSubstr("\"classes\":[\" a\",\"b \"]"));
}

// `verity project create --help`: "The classes (2 to 256 unique names)". One class, or a
// repeated one, fails with one error line and creates nothing.
TEST_F(CliProbeTest, ProjectCreateRefusesOneClassOrARepeatedClass) {
  for (const std::string classes : {"only", "a,b,a"}) {
    const std::string p = ProjectName(classes == "only" ? "-1" : "-2");
    CliResult refused = Run({"project", "create", p, "--classes=" + classes});
    EXPECT_NE(refused.code, 0) << classes;
    EXPECT_EQ(refused.out, "") << classes;
    EXPECT_THAT(refused.err, StartsWith("verity: ")) << classes;
    CliResult shown = Run({"project", "show", p});
    EXPECT_EQ(shown.code, 1) << classes;
    EXPECT_THAT(shown.err, StartsWith("verity: NOT_FOUND: ")) << classes;
  }
}

// `verity project create --help`: "Prints the new project as `project show` does."
TEST_F(CliProbeTest, ProjectCreatePrintsWhatProjectShowPrints) {
  const std::string p = ProjectName();
  CliResult created = Run({"project", "create", p, "--classes=a,b,c", "--item_feature_dim=3",
                           "--min_labels_per_item=2"});
  ASSERT_EQ(created.code, 0) << created.err;
  CliResult shown = Run({"project", "show", p});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(created.out, shown.out);
}

// `verity project list --help`: "With --output=json, an array of project objects as `project
// show --output=json` prints them."
TEST_F(CliProbeTest, ProjectListJsonHoldsWhatProjectShowJsonPrints) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  CliResult shown = Run({"project", "show", p, "--output=json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  const std::string object(absl::StripTrailingAsciiWhitespace(shown.out));
  CliResult listed = Run({"project", "list", "--output=json"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  std::vector<std::string> lines = Lines(listed.out);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.front(), "[");
  EXPECT_EQ(lines.back(), "]");
  std::vector<std::string> objects;
  for (std::string line : lines) {
    objects.push_back(std::string(absl::StripSuffix(line, ",")));
  }
  EXPECT_THAT(objects, Contains(object)) << listed.out;
}

// ---------------------------------------------------------------------------
// annotators, models, suggestions

// `verity annotator show --help`: "For each ID ... With --output=json, an array as `annotator
// list --output=json` prints it." Two IDs: an array of two objects in the order given.
TEST_F(CliProbeTest, AnnotatorShowOfTwoIdsPrintsAnArrayOfTwo) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\ni1,b,dog\ni2,b,dog\n");
  CliResult shown = Run({"annotator", "show", "b", "a", "--project=" + p, "--output=json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  std::vector<std::string> lines = Lines(shown.out);
  ASSERT_EQ(lines.size(), 4u) << shown.out;
  EXPECT_THAT(lines[1], StartsWith("{\"annotator\":\"b\",\"num_labels\":2,"));
  EXPECT_THAT(lines[2], StartsWith("{\"annotator\":\"a\",\"num_labels\":1,"));
}

// `verity annotator --help`: "An annotator whose id is add, list or show needs the long form
// (`annotator show list`)."
TEST_F(CliProbeTest, AnAnnotatorNamedListIsShownByTheLongForm) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,list,cat\n");
  CliResult shown = Run({"annotator", "show", "list", "--project=" + p});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_THAT(shown.out, StartsWith("annotator: list\nnum_labels: 1\n"));
}

// `verity status --help`: "Same as `model status`."; `verity versions --help`: "Same as `model
// versions`."
TEST_F(CliProbeTest, StatusAndVersionsAreTheModelCommands) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  ASSERT_EQ(Run({"model", "train", "--project=" + p}).code, 0);
  for (const std::string output : {"text", "json"}) {
    CliResult model_status = Run({"model", "status", "--project=" + p, "--output=" + output});
    CliResult status = Run({"status", "--project=" + p, "--output=" + output});
    ASSERT_EQ(status.code, 0) << status.err;
    EXPECT_EQ(status.out, model_status.out) << output;
    CliResult model_versions = Run({"model", "versions", "--project=" + p, "--output=" + output});
    CliResult versions = Run({"versions", "--project=" + p, "--output=" + output});
    ASSERT_EQ(versions.code, 0) << versions.err;
    EXPECT_EQ(versions.out, model_versions.out) << output;
  }
}

// `verity model train --help`: "FAILED_PRECONDITION when the project has no labels."; `verity
// --help`: "1 the command failed (one line \"verity: CODE: message\" on stderr)".
TEST_F(CliProbeTest, ModelTrainWithoutLabelsIsFailedPrecondition) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  CliResult trained = Run({"model", "train", "--project=" + p});
  EXPECT_EQ(trained.code, 1);
  EXPECT_EQ(trained.out, "");
  EXPECT_THAT(trained.err, StartsWith("verity: FAILED_PRECONDITION: "));
  EXPECT_EQ(std::count(trained.err.begin(), trained.err.end(), '\n'), 1) << trained.err;
}

// `verity model versions --help`: "--limit=N Versions to list, 1 to 1000."; the two newest of
// three fits with --limit=2, newest first.
TEST_F(CliProbeTest, ModelVersionsLimitListsTheNewest) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  // models.proto: a fit with nothing new returns the current version, so each fit follows a new
  // label.
  for (int i = 0; i < 3; ++i) {
    Submit(p, absl::StrCat("item,annotator,label\ni", i, ",a,cat\n"));
    ASSERT_EQ(Run({"model", "train", "--project=" + p}).code, 0);
  }
  CliResult listed = Run({"model", "versions", "--project=" + p, "--limit=2", "--output=json"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  std::vector<std::string> lines = Lines(listed.out);
  ASSERT_EQ(lines.size(), 4u) << listed.out;
  EXPECT_THAT(lines[1], StartsWith("{\"version\":3,"));
  EXPECT_THAT(lines[2], StartsWith("{\"version\":2,"));
  for (const std::string bad : {"0", "1001"}) {
    CliResult refused = Run({"model", "versions", "--project=" + p, "--limit=" + bad});
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.err;
  }
}

// `verity suggest items --help`: "--k=N Items to suggest, 1 to 1000"; `verity --help`: "2 a
// usage error".
TEST_F(CliProbeTest, SuggestItemsKOutOfRangeIsAUsageError) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  for (const std::string bad : {"0", "1001", "x"}) {
    CliResult refused = Run({"suggest", "items", "--project=" + p, "--annotator=a", "--k=" + bad});
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.err;
    EXPECT_THAT(refused.err, HasSubstr("--k")) << bad;
  }
}

// `verity suggest items --help`: "never an item they labelled ... Fewer than K (or none) when
// fewer items are open." Annotator a labelled i1 and i2 of three items: only i3 is suggested.
TEST_F(CliProbeTest, SuggestItemsNeverOffersAnItemTheAnnotatorLabelled) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\ni2,a,dog\ni3,b,dog\n");
  CliResult suggested =
      Run({"suggest", "items", "--project=" + p, "--annotator=a", "--k=5", "--output=json"});
  ASSERT_EQ(suggested.code, 0) << suggested.err;
  std::vector<std::string> lines = Lines(suggested.out);
  ASSERT_EQ(lines.size(), 3u) << suggested.out;
  EXPECT_THAT(lines[1], StartsWith("{\"item\":\"i3\","));
}

// `verity suggest annotators --help`: "NOT_FOUND for an unknown item."
TEST_F(CliProbeTest, SuggestAnnotatorsForAnUnknownItemIsNotFound) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  CliResult refused = Run({"suggest", "annotators", "--project=" + p, "--item=nope"});
  EXPECT_EQ(refused.code, 1);
  EXPECT_THAT(refused.err, StartsWith("verity: NOT_FOUND: "));
}

// client/csv_input.h: LabelParser::Parse — "Anything else is INVALID_ARGUMENT: `label \"x\" is
// neither a class name (a, b, c) nor a class index in [0, 3)`", after "<file>: line <n>: ".
TEST_F(CliProbeTest, AnOutOfRangeLabelIndexNamesTheClassesAndTheRange) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string csv = WriteFile("l.csv", "item,annotator,label\ni1,a,cat\ni2,a,2\n");
  CliResult refused = Run({"submit", "--project=" + p, "--csv=" + csv});
  EXPECT_NE(refused.code, 0);
  EXPECT_THAT(refused.err,
              HasSubstr(csv + ": line 3: label \"2\" is neither a class name (cat, dog) nor a "
                              "class index in [0, 2)"))
      << refused.err;
}

// client/csv_input.h: "Every CSV is parsed with the RFC 4180 parser" — RFC 4180 records end in
// CRLF: a labels file saved with CRLF line ends reads "cat", not "cat\r".
TEST_F(CliProbeTest, ALabelsCsvWithCrLfLineEnds) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  CliResult submitted = Submit(p, "item,annotator,label\r\ni1,a,cat\r\ni2,a,dog\r\n");
  EXPECT_EQ(submitted.out, "accepted=2 duplicate=0 revised=0 stale=0 rejected=0\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_THAT(posteriors.out, HasSubstr("\ni2,dog,"));
}

// client/csv_input.h: "INVALID_ARGUMENT for an empty name in a comma list"; nothing is created.
TEST_F(CliProbeTest, AnEmptyClassNameInTheCommaListIsRefused) {
  const std::string p = ProjectName();
  CliResult refused = Run({"project", "create", p, "--classes=cat,,dog"});
  EXPECT_NE(refused.code, 0);
  EXPECT_EQ(refused.out, "");
  EXPECT_THAT(refused.err, StartsWith("verity: "));
  EXPECT_EQ(Run({"project", "show", p}).code, 1);
}

// client/csv_input.h FormatCsvRecord: "quoting fields that contain a comma" — a class name with
// a comma (from a classes file, one name per line) is quoted in the header and the label cell.
TEST_F(CliProbeTest, AClassNameWithACommaIsQuotedInThePosteriorsCsv) {
  const std::string p = ProjectName();
  const std::string file = WriteFile("classes.txt", "x,y\nz\n");
  ASSERT_EQ(Run({"project", "create", p, "--classes_file=" + file, "--method=mv"}).code, 0);
  Submit(p, "item,annotator,label\ni1,a,0\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  std::vector<std::string> lines = Lines(posteriors.out);
  ASSERT_EQ(lines.size(), 2u) << posteriors.out;
  EXPECT_EQ(lines[0], "item,label,confidence,\"p_x,y\",p_z,num_labels");
  EXPECT_THAT(lines[1], StartsWith("i1,\"x,y\","));
}

// README.md: "`--output=json` makes every command print one JSON document for scripts". An item
// id and a class name with a quote and a backslash are escaped.
TEST_F(CliProbeTest, JsonOutputEscapesQuotesAndBackslashes) {
  const std::string p = ProjectName();
  ASSERT_EQ(Run({"project", "create", p, "--classes=a\"b\\c,d", "--method=mv"}).code, 0);
  Submit(p, "item,annotator,label\n\"q\"\"x\\y\",w,0\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p, "--output=json"});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_THAT(posteriors.out, HasSubstr("{\"item\":\"q\\\"x\\\\y\",\"label\":\"a\\\"b\\\\c\","))
      << posteriors.out;
}

// `verity item add --help`: "optionally priority, a number (items of higher priority are
// suggested first; empty leaves it unchanged)". i1 gets priority 5; a second file with an empty
// priority for i1 leaves it first.
TEST_F(CliProbeTest, AnEmptyPriorityLeavesTheItemsPriorityUnchanged) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  ASSERT_EQ(Run({"item", "add", "--project=" + p,
                 "--csv=" + WriteFile("a.csv", "item,priority\ni0,\ni1,5\ni2,\n")})
                .code,
            0);
  CliResult again =
      Run({"item", "add", "--project=" + p, "--csv=" + WriteFile("b.csv", "item,priority\ni1,\n")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, "added=0 updated=1\n");
  CliResult suggested =
      Run({"suggest", "items", "--project=" + p, "--annotator=n", "--k=1", "--output=json"});
  ASSERT_EQ(suggested.code, 0) << suggested.err;
  EXPECT_THAT(suggested.out, HasSubstr("{\"item\":\"i1\","));
}

// `verity suggest items --help`: "--candidates=ID,... Choose only among these items (unknown ids
// are ignored)".
TEST_F(CliProbeTest, SuggestItemsCandidatesIgnoreUnknownIds) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,b,cat\ni2,b,dog\ni3,b,dog\n");
  CliResult suggested = Run({"suggest", "items", "--project=" + p, "--annotator=a",
                             "--candidates=i2,ghost", "--k=5", "--output=json"});
  ASSERT_EQ(suggested.code, 0) << suggested.err;
  std::vector<std::string> lines = Lines(suggested.out);
  ASSERT_EQ(lines.size(), 3u) << suggested.out;
  EXPECT_THAT(lines[1], StartsWith("{\"item\":\"i2\","));
}

// `verity project settings --help`: "0 resets a number to the server default"; `project show
// --help`: it prints "the settings that differ from the server defaults".
TEST_F(CliProbeTest, ProjectSettingsZeroResetsANumberToTheDefault) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--min_labels_per_item=3"});
  CliResult shown = Run({"project", "show", p});
  ASSERT_EQ(shown.code, 0) << shown.err;
  ASSERT_THAT(shown.out, HasSubstr("min_labels_per_item: 3"));
  CliResult reset = Run({"project", "settings", p, "--min_labels_per_item=0"});
  ASSERT_EQ(reset.code, 0) << reset.err;
  EXPECT_THAT(reset.out, Not(HasSubstr("min_labels_per_item")));
}

// `verity accuracy --help`: "items clamped to gold by `item add` ... are skipped and counted";
// JSON "skipped": {..., "clamped_to_gold", ...}. i1 has gold from item add and a label; i2 is
// scored.
TEST_F(CliProbeTest, AccuracySkipsItemsClampedToGoldOnTheRealServer) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  ASSERT_EQ(Run({"item", "add", "--project=" + p,
                 "--csv=" + WriteFile("items.csv", "item,gold\ni1,dog\n")})
                .code,
            0);
  Submit(p, "item,annotator,label\ni1,a,dog\ni2,a,cat\n");
  const std::string gold = WriteFile("gold.csv", "item,label\ni1,dog\ni2,dog\n");
  CliResult scored = Run({"accuracy", "--project=" + p, "--gold_csv=" + gold, "--output=json"});
  ASSERT_EQ(scored.code, 0) << scored.err;
  EXPECT_THAT(scored.out, StartsWith("{\"accuracy\":0,"));
  EXPECT_THAT(scored.out, HasSubstr("\"gold_items\":1"));
  EXPECT_THAT(scored.out, HasSubstr("\"clamped_to_gold\":1"));
}

// `verity annotator list --help`: "--confusion prints each profile with its confusion matrix
// instead"; `annotator show --help` prints each profile with its matrix. Both print the same
// text for the project's two annotators.
TEST_F(CliProbeTest, AnnotatorListWithConfusionPrintsWhatShowPrints) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,cat\ni1,b,dog\ni2,b,dog\n");
  CliResult listed = Run({"annotator", "list", "--project=" + p, "--confusion"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  CliResult shown = Run({"annotator", "show", "a", "b", "--project=" + p});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(listed.out, shown.out);
}

// `verity suggest items --help`: "Each suggestion LEASES its item to the annotator (reserving a
// label slot until the lease expires or their label arrives)". With max_labels_per_item=1 the one
// item's only slot is leased to a: b gets nothing.
TEST_F(CliProbeTest, ASuggestionLeasesTheItemsLastSlot) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--max_labels_per_item=1"});
  ASSERT_EQ(
      Run({"item", "add", "--project=" + p, "--csv=" + WriteFile("i.csv", "item\ni1\n")}).code, 0);
  CliResult first =
      Run({"suggest", "items", "--project=" + p, "--annotator=a", "--k=1", "--output=json"});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("{\"item\":\"i1\","));
  CliResult second =
      Run({"suggest", "items", "--project=" + p, "--annotator=b", "--k=1", "--output=json"});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_THAT(second.out, StartsWith("["));
  EXPECT_THAT(second.out, Not(HasSubstr("\"item\""))) << second.out;
}

// `verity suggest items --help`: "never a resolved item"; `--max_labels_per_item`: "Labels after
// which an item is resolved". i1 has its one label: a new annotator is offered only i2.
TEST_F(CliProbeTest, SuggestItemsNeverOffersAResolvedItem) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--max_labels_per_item=1"});
  ASSERT_EQ(
      Run({"item", "add", "--project=" + p, "--csv=" + WriteFile("i.csv", "item\ni1\ni2\n")}).code,
      0);
  Submit(p, "item,annotator,label\ni1,b,cat\n");
  CliResult suggested =
      Run({"suggest", "items", "--project=" + p, "--annotator=a", "--k=5", "--output=json"});
  ASSERT_EQ(suggested.code, 0) << suggested.err;
  std::vector<std::string> lines = Lines(suggested.out);
  ASSERT_EQ(lines.size(), 3u) << suggested.out;
  EXPECT_THAT(lines[1], StartsWith("{\"item\":\"i2\","));
}

// `verity model status --help`: "Prints method (the one the next fit uses)"; JSON {"project",
// "method", ...}. Fitted with mv, then set to ds: status says ds, the current version mv.
TEST_F(CliProbeTest, ModelStatusMethodIsTheOneTheNextFitUses) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  ASSERT_EQ(Run({"model", "train", "--project=" + p}).code, 0);
  ASSERT_EQ(Run({"project", "settings", p, "--method=ds"}).code, 0);
  CliResult status = Run({"model", "status", "--project=" + p, "--output=json"});
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_THAT(status.out, StartsWith("{\"project\":\"" + p + "\",\"method\":\"ds\","));
  EXPECT_THAT(status.out, HasSubstr("\"current_version\":{\"version\":1,\"method\":\"mv\","));
}

// `verity project show --help`: "With --output=json: {"name", "classes", "item_feature_dim",
// "annotator_feature_dim", "method", "settings": {"model": {...}, "assignment": {...}, "limits":
// {...}} ..., "created_at", "num_items", "num_annotators", "num_labels", "num_revisions"}" —
// every one of these keys, in this order.
TEST_F(CliProbeTest, ProjectShowJsonHasTheDocumentedKeysInOrder) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  CliResult shown = Run({"project", "show", p, "--output=json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  size_t at = 0;
  for (const std::string key : {"name", "classes", "item_feature_dim", "annotator_feature_dim",
                                "method", "settings", "model", "assignment", "limits", "created_at",
                                "num_items", "num_annotators", "num_labels", "num_revisions"}) {
    const size_t found = shown.out.find("\"" + key + "\":", at);
    ASSERT_NE(found, std::string::npos) << key << " after " << at << " in " << shown.out;
    at = found;
  }
}

// `verity project settings --help`: "Prints the updated project as `project show` does".
TEST_F(CliProbeTest, ProjectSettingsPrintsWhatProjectShowPrints) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  CliResult changed =
      Run({"project", "settings", p, "--lease_seconds=60", "--confidence_target=0.9"});
  ASSERT_EQ(changed.code, 0) << changed.err;
  CliResult shown = Run({"project", "show", p});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(changed.out, shown.out);
}

// README.md: "without `--tls_ca` it sends a key only to a loopback server unless given
// `--allow_plaintext_key`"; `verity --help`: --server takes "several replicas ... separated by
// commas: calls are spread over them". A list of a loopback server and a TEST-NET-1 address with
// a key is refused (2) before the key can reach the second.
TEST_F(CliProbeTest, AKeyIsNotSentInPlaintextToAnOffLoopbackReplicaOfAList) {
  CliResult refused = Run({"project", "list", "--api_key=vk_0123456789abcdef_secret",
                           "--timeout=2s", "--server=" + Address() + ",192.0.2.1:50051"});
  EXPECT_EQ(refused.code, 2) << refused.out << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("192.0.2.1"));
}

// ingest.proto BatchAck: "revised: Replaced a different live label"; `submit --help` prints
// "accepted=N duplicate=N revised=N". One file labelling (i1, a) twice, cat then dog: the first
// is new, the second replaces it; the live label is dog.
TEST_F(CliProbeTest, AFileThatRelabelsAnItemCountsARevision) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  CliResult submitted = Submit(p, "item,annotator,label\ni1,a,cat\ni1,a,dog\n");
  EXPECT_EQ(submitted.out, "accepted=1 duplicate=0 revised=1 stale=0 rejected=0\n");
  CliResult posteriors = Run({"posteriors", "--project=" + p});
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_THAT(posteriors.out, HasSubstr("\ni1,dog,"));
}

// `verity model train --help` (kJsonErrors of every command): "Errors go to stderr as one line in
// every output mode; stdout is then empty."
TEST_F(CliProbeTest, AnErrorWithOutputJsonLeavesStdoutEmpty) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  CliResult trained = Run({"model", "train", "--project=" + p, "--output=json"});
  EXPECT_EQ(trained.code, 1);
  EXPECT_EQ(trained.out, "");
  EXPECT_THAT(trained.err, StartsWith("verity: FAILED_PRECONDITION: "));
  EXPECT_EQ(std::count(trained.err.begin(), trained.err.end(), '\n'), 1) << trained.err;
}

// `verity export --help`: "With --out the file is written under a temporary name and renamed on
// success" (and `posteriors --help`: "a failed call leaves FILE as it was"). An export of an
// unknown project leaves the file as it was.
TEST_F(CliProbeTest, AFailedExportLeavesItsOutFileAsItWas) {
  const std::string out = WriteFile("export.csv", "precious\n");
  CliResult failed = Run({"export", "--project=" + ProjectName("-none"), "--out=" + out});
  EXPECT_EQ(failed.code, 1);
  EXPECT_THAT(failed.err, StartsWith("verity: NOT_FOUND: "));
  EXPECT_EQ(ReadText(out), "precious\n");
}

// `verity --help`: "1 the command failed (one line ...)" — `submit` (a stream "with retries")
// against an unreachable server fails within its --timeout rather than retrying for ever.
TEST_F(CliProbeTest, SubmitToAnUnreachableServerFailsWithOneLine) {
  const std::string csv = WriteFile("l.csv", "item,annotator,label\ni1,a,cat\n");
  CliResult result = RunBinary(
      {"submit", "--project=x", "--csv=" + csv, "--timeout=3s", "--server=" + DeadAddress()});
  EXPECT_EQ(result.code, 1) << result.err;
  EXPECT_EQ(result.out, "");
  std::vector<std::string> lines = Lines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_THAT(lines[0], StartsWith("verity: UNAVAILABLE: "));
}

// `verity --help`: "--server ... several replicas of one database separated by commas: calls are
// spread over them and move to another replica when one fails (a stream resends its
// unacknowledged batches there)". A dead replica first in the list: submit still succeeds.
TEST_F(CliProbeTest, SubmitMovesPastADeadReplicaOfTheList) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string csv =
      WriteFile("l.csv", "item,annotator,label\ni1,a,cat\ni2,a,dog\ni3,a,dog\n");
  CliResult submitted = Run({"submit", "--project=" + p, "--csv=" + csv, "--batch_size=1",
                             "--server=" + DeadAddress() + "," + Address()});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=3 duplicate=0 revised=0 stale=0 rejected=0\n");
}

// client/csv_input.h: "Every CSV ... must start with a header naming its columns"; errors "begin
// with \"<file>: line <n>: \"". An empty labels file names the file.
TEST_F(CliProbeTest, AnEmptyLabelsFileIsAnErrorNamingTheFile) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  const std::string csv = WriteFile("empty.csv", "");
  CliResult refused = Run({"submit", "--project=" + p, "--csv=" + csv});
  EXPECT_NE(refused.code, 0);
  EXPECT_THAT(refused.err, StartsWith("verity: "));
  EXPECT_THAT(refused.err, HasSubstr(csv)) << refused.err;
}

// `verity export --help`: "numbers in their shortest exact form": each probability and the
// confidence parse back to a double that no shorter %g text gives.
TEST_F(CliProbeTest, ExportWritesNumbersInTheirShortestExactForm) {
  const std::string p = ProjectName();
  Create(p, "a,b,c", {"--method=ds"});
  Submit(p,
         "item,annotator,label\ni1,w1,a\ni1,w2,b\ni2,w1,a\ni2,w3,c\ni3,w2,b\ni3,w3,b\n"
         "i4,w1,c\ni4,w2,a\ni4,w3,b\n");
  ASSERT_EQ(Run({"model", "train", "--project=" + p}).code, 0);
  CliResult exported = Run({"export", "--project=" + p});
  ASSERT_EQ(exported.code, 0) << exported.err;
  std::vector<std::string> lines = Lines(exported.out);
  ASSERT_EQ(lines.size(), 5u) << exported.out;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> fields = absl::StrSplit(lines[i], ',');
    ASSERT_EQ(fields.size(), 11u) << lines[i];
    for (int column = 3; column <= 6; ++column) {  // confidence, p_a, p_b, p_c
      const std::string& text = fields[column];
      double value = 0;
      ASSERT_TRUE(absl::SimpleAtod(text, &value)) << text;
      int shortest = 17;
      for (int digits = 1; digits <= 17; ++digits) {
        if (std::strtod(absl::StrFormat("%.*g", digits, value).c_str(), nullptr) == value) {
          shortest = digits;
          break;
        }
      }
      int significant = 0;
      bool leading = true;
      for (char c : text.substr(0, text.find_first_of("eE"))) {
        if (c < '0' || c > '9') continue;
        if (leading && c == '0') continue;
        leading = false;
        ++significant;
      }
      // Trailing zeros of an integer part ("100") are not significant here; there are none in
      // probabilities but 0 and 1.
      if (value == 0 || value == 1) continue;
      EXPECT_EQ(significant, shortest) << "column " << column << " of " << lines[i];
    }
  }
}

// `verity model train --help`: "The call waits for the fit ... so its deadline is --timeout when
// given and 30m otherwise." A deadline of one microsecond expires: DEADLINE_EXCEEDED, exit 1.
TEST_F(CliProbeTest, ModelTrainHonoursAGivenTimeout) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  CliResult trained = Run({"model", "train", "--project=" + p, "--timeout=1us"});
  EXPECT_EQ(trained.code, 1) << trained.out;
  EXPECT_THAT(trained.err, StartsWith("verity: DEADLINE_EXCEEDED: "));
}

// README.md's tour: "$V posteriors --project=bluebirds | head -3   # item,label,confidence,..."
// — the three lines and nothing else: `head` closing the pipe early does not make the `verity`
// binary print an error. 5,000 items (well past a 64 KiB pipe buffer).
TEST_F(CliProbeTest, PosteriorsPipedIntoHeadPrintsNoError) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  std::string text = "item,annotator,label\n";
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&text, "item-number-", i, ",a,cat\n");
  Submit(p, text);
  const std::string err = WriteFile("verity.err", "");
  const std::string out = WriteFile("head.out", "");
  const std::string command =
      absl::StrCat("'", RunfilePath("client/verity"), "' posteriors --project=", p,
                   " --server=", Address(), " 2>'", err, "' | head -3 >'", out, "'");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::vector<std::string> lines = Lines(ReadText(out));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "item,label,confidence,p_cat,p_dog,num_labels");
  EXPECT_EQ(ReadText(err), "");
}

// `verity item add --help`: "optionally gold (or label), a class name or class index".
TEST_F(CliProbeTest, ItemAddTakesAGoldColumnNamedLabel) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--method=mv"});
  CliResult added = Run(
      {"item", "add", "--project=" + p, "--csv=" + WriteFile("items.csv", "item,label\ni1,dog\n")});
  ASSERT_EQ(added.code, 0) << added.err;
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  CliResult exported = Run({"export", "--project=" + p});
  ASSERT_EQ(exported.code, 0) << exported.err;
  std::vector<std::string> lines = Lines(exported.out);
  ASSERT_EQ(lines.size(), 2u) << exported.out;
  EXPECT_THAT(lines[1], StartsWith("i1,dog,1,"));
  EXPECT_THAT(lines[1], testing::EndsWith(",true"));
}

// `verity suggest items --help`: "The annotator is created if new."; `annotator show` then finds
// them (with no labels) instead of NOT_FOUND.
TEST_F(CliProbeTest, SuggestItemsCreatesANewAnnotator) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  CliResult suggested = Run({"suggest", "items", "--project=" + p, "--annotator=fresh"});
  ASSERT_EQ(suggested.code, 0) << suggested.err;
  CliResult shown = Run({"annotator", "show", "fresh", "--project=" + p});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_THAT(shown.out, StartsWith("annotator: fresh\nnum_labels: 0\n"));
}

// `verity annotator add --help`: "annotator (or id) ... existing annotators are updated. Prints
// added=N updated=N".
TEST_F(CliProbeTest, AnnotatorAddAgainUpdatesWithAnIdColumn) {
  const std::string p = ProjectName();
  Create(p, "cat,dog", {"--annotator_feature_dim=1"});
  const std::string csv = WriteFile("a.csv", "id,f0\nw1,0.5\nw2,1\n");
  CliResult first = Run({"annotator", "add", "--project=" + p, "--csv=" + csv});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out, "added=2 updated=0\n");
  CliResult second = Run({"annotator", "add", "--project=" + p, "--csv=" + csv});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(second.out, "added=0 updated=2\n");
}

// `verity posteriors --help`: "a progress meter is drawn on stderr when it is a terminal and the
// posteriors do not go to a terminal" (stdout here is a file). 3,000 items.
TEST_F(CliProbeTest, PosteriorsDrawAMeterWhenStderrIsATerminal) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  std::string text = "item,annotator,label\n";
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&text, "i", i, ",a", i % 7, ",cat\n");
  Submit(p, text);
  CliResult posteriors = RunBinary({"posteriors", "--project=" + p, "--server=" + Address()}, true);
  ASSERT_EQ(posteriors.code, 0) << posteriors.err;
  EXPECT_EQ(Lines(posteriors.out).size(), 3001u);
  EXPECT_THAT(posteriors.err, HasSubstr("/3,000 ")) << posteriors.err;
}

// `verity export --help`: "writes every item of the project in creation order": an item added
// by `item add` without any label is exported too, with num_labels 0.
TEST_F(CliProbeTest, ExportIncludesAnItemWithoutLabels) {
  const std::string p = ProjectName();
  Create(p, "cat,dog");
  ASSERT_EQ(
      Run({"item", "add", "--project=" + p, "--csv=" + WriteFile("i.csv", "item\ni0\n")}).code, 0);
  Submit(p, "item,annotator,label\ni1,a,cat\n");
  CliResult exported = Run({"export", "--project=" + p});
  ASSERT_EQ(exported.code, 0) << exported.err;
  std::vector<std::string> lines = Lines(exported.out);
  ASSERT_EQ(lines.size(), 3u) << exported.out;
  std::vector<std::string> fields = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(fields.size(), 10u) << lines[1];
  EXPECT_EQ(fields[0], "i0");
  EXPECT_EQ(fields[6], "0");  // num_labels
  EXPECT_THAT(lines[2], StartsWith("i1,cat,0,"));
}

// ---------------------------------------------------------------------------
// global flags and errors

// `verity --help`: "--timeout=DURATION Deadline of each call: 30s, 2m, 500ms; a plain number is
// seconds"; a value that is no duration is a usage error (2).
TEST_F(CliProbeTest, TimeoutTakesAPlainNumberAsSecondsAndRefusesGarbage) {
  CliResult plain = Run({"project", "list", "--timeout=5"});
  EXPECT_EQ(plain.code, 0) << plain.err;
  CliResult units = Run({"project", "list", "--timeout=1m30s"});
  EXPECT_EQ(units.code, 0) << units.err;
  CliResult refused = Run({"project", "list", "--timeout=soon"});
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("--timeout"));
}

// client/command_line.h: "Flags follow absl/gflags syntax anyway: `--name=value` or `--name
// value`, one or two leading dashes".
TEST_F(CliProbeTest, FlagsTakeTheirValueAsTheNextWordAndOneDash) {
  const std::string p = ProjectName();
  CliResult created = Run({"project", "create", p, "-classes", "cat,dog"});
  ASSERT_EQ(created.code, 0) << created.err;
  const std::string csv = WriteFile("l.csv", "item,annotator,label\ni1,a,cat\n");
  CliResult submitted = Run({"submit", "--project", p, "--csv", csv});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  EXPECT_EQ(submitted.out, "accepted=1 duplicate=0 revised=0 stale=0 rejected=0\n");
}

// client/command_line.h: "a flag ... given twice" is an error; `verity --help`: "2 a usage
// error".
TEST_F(CliProbeTest, AFlagGivenTwiceIsAUsageError) {
  CliResult refused = Run({"model", "status", "--project=a", "--project=b"});
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("--project"));
}

// `verity --help`: "1 the command failed (one line \"verity: CODE: message\" on stderr)" for an
// unreachable server, on the binary itself (gRPC's own log lines would come first), naming the
// address (client/cli_test.cc checks the in-process message only).
TEST_F(CliProbeTest, AnUnreachableServerIsOneErrorLineFromTheBinary) {
  const std::string server = DeadAddress();
  CliResult result = RunBinary({"project", "list", "--timeout=3s", "--server=" + server});
  EXPECT_EQ(result.code, 1) << result.err;
  EXPECT_EQ(result.out, "");
  std::vector<std::string> lines = Lines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_THAT(lines[0], StartsWith("verity: UNAVAILABLE: "));
  EXPECT_THAT(lines[0], HasSubstr(server));
}

// README.md: "`verity --help` and `verity <command> --help` document every command"; `verity
// --help`: "--help Print usage and exit; also `verity help <command>`." Both print the same.
TEST_F(CliProbeTest, HelpCommandPrintsTheCommandsHelp) {
  CliResult flag = RunBinary({"model", "versions", "--help"});
  CliResult word = RunBinary({"help", "model", "versions"});
  EXPECT_EQ(flag.code, 0);
  EXPECT_EQ(word.code, 0);
  EXPECT_THAT(flag.out, StartsWith("Usage: verity model versions"));
  EXPECT_EQ(word.out, flag.out);
  EXPECT_EQ(word.err, "");
}

// ---------------------------------------------------------------------------
// API keys: the `verity` binary with VERITY_API_KEY, against a server with authentication on.

class CliAuthProbeTest : public CliProbeTest {
 protected:
  static void SetUpTestSuite() { StartSuite(/*auth=*/true); }

  void SetUp() override {
    CliProbeTest::SetUp();
    admin_key_ = std::string(absl::StripAsciiWhitespace(ReadText(pg_->dir() + "/admin.key")));
    ASSERT_THAT(admin_key_, StartsWith("vk_"));
  }

  // The binary against the suite's server with VERITY_API_KEY=`key`.
  CliResult As(const std::string& key, std::vector<std::string> args) {
    args.push_back("--server=" + Address());
    return RunBinary(args, false, key);
  }

  // The value of the line "name: value" of `key create` output; "" if none.
  static std::string Field(const std::string& out, const std::string& name) {
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      if (absl::ConsumePrefix(&line, name + ": ")) return std::string(line);
    }
    return "";
  }

  // A new key of `role` for `projects` ("" = every project): its secret and its key_id.
  std::pair<std::string, std::string> NewKey(const std::string& role, const std::string& projects) {
    std::vector<std::string> args = {"key", "create", "--role=" + role};
    if (!projects.empty()) args.push_back("--projects=" + projects);
    CliResult created = As(admin_key_, args);
    EXPECT_EQ(created.code, 0) << created.err;
    return {Field(created.out, "secret_key"), Field(created.out, "key_id")};
  }

  std::string admin_key_;
};

// README.md: "A server with authentication on ... refuses a call without a valid key with
// `UNAUTHENTICATED`"; `verity --help`: exit 1, one line "verity: CODE: message". A key that is
// not a key at all, and a well-formed key of an unknown id.
TEST_F(CliAuthProbeTest, AnInvalidKeyIsUnauthenticatedInOneLine) {
  for (const std::string& key :
       std::vector<std::string>{"garbage", "vk_0123456789abcdef_" + std::string(43, 'A')}) {
    CliResult refused = As(key, {"project", "list"});
    EXPECT_EQ(refused.code, 1) << key;
    EXPECT_EQ(refused.out, "") << key;
    std::vector<std::string> lines = Lines(refused.err);
    ASSERT_EQ(lines.size(), 1u) << refused.err;
    EXPECT_THAT(lines[0], StartsWith("verity: UNAUTHENTICATED: ")) << key;
  }
}

// `verity --help`: "--api_key=KEY API key sent with every call ...; default $VERITY_API_KEY": the
// flag wins over a bad key in the variable.
TEST_F(CliAuthProbeTest, TheApiKeyFlagWinsOverTheVariable) {
  CliResult listed = As("garbage", {"project", "list", "--api_key=" + admin_key_});
  EXPECT_EQ(listed.code, 0) << listed.err;
}

// README.md: "(reader: queries; writer: also labels, items, training, `suggest items`; admin:
// also projects and settings ...)". A writer suggests items and trains but may not change
// settings.
TEST_F(CliAuthProbeTest, AWriterSuggestsItemsButMayNotChangeSettings) {
  const std::string p = ProjectName();
  ASSERT_EQ(As(admin_key_, {"project", "create", p, "--classes=cat,dog"}).code, 0);
  auto [writer, writer_id] = NewKey("writer", p);
  ASSERT_THAT(writer, StartsWith("vk_"));
  const std::string csv = WriteFile("l.csv", "item,annotator,label\ni1,a,cat\n");
  CliResult submitted = As(writer, {"submit", "--project=" + p, "--csv=" + csv});
  EXPECT_EQ(submitted.code, 0) << submitted.err;
  CliResult suggested = As(writer, {"suggest", "items", "--project=" + p, "--annotator=b"});
  EXPECT_EQ(suggested.code, 0) << suggested.err;
  CliResult trained = As(writer, {"model", "train", "--project=" + p});
  EXPECT_EQ(trained.code, 0) << trained.err;
  CliResult refused = As(writer, {"project", "settings", p, "--method=mv"});
  EXPECT_EQ(refused.code, 1);
  EXPECT_THAT(refused.err, StartsWith("verity: PERMISSION_DENIED: "));
}

// `verity key create --help`: "a reader queries (projects, posteriors, annotator profiles, model
// status and versions, suggest annotators); a writer also ... suggests items (which leases
// them)".
TEST_F(CliAuthProbeTest, AReaderSuggestsAnnotatorsButNotItems) {
  const std::string p = ProjectName();
  ASSERT_EQ(As(admin_key_, {"project", "create", p, "--classes=cat,dog"}).code, 0);
  const std::string csv = WriteFile("l.csv", "item,annotator,label\ni1,a,cat\n");
  ASSERT_EQ(As(admin_key_, {"submit", "--project=" + p, "--csv=" + csv}).code, 0);
  auto [reader, reader_id] = NewKey("reader", p);
  CliResult annotators =
      As(reader, {"suggest", "annotators", "--project=" + p, "--item=i1", "--candidates=b,c"});
  EXPECT_EQ(annotators.code, 0) << annotators.err;
  CliResult items = As(reader, {"suggest", "items", "--project=" + p, "--annotator=b"});
  EXPECT_EQ(items.code, 1);
  EXPECT_THAT(items.err, StartsWith("verity: PERMISSION_DENIED: "));
}

// README.md: "admin: also projects and settings, and keys when valid for every project". An admin
// key limited to one project may not list keys.
TEST_F(CliAuthProbeTest, AnAdminKeyOfOneProjectMayNotManageKeys) {
  const std::string p = ProjectName();
  ASSERT_EQ(As(admin_key_, {"project", "create", p, "--classes=cat,dog"}).code, 0);
  auto [admin, admin_id] = NewKey("admin", p);
  CliResult settings = As(admin, {"project", "settings", p, "--method=mv"});
  EXPECT_EQ(settings.code, 0) << settings.err;
  CliResult refused = As(admin, {"key", "list"});
  EXPECT_EQ(refused.code, 1);
  EXPECT_THAT(refused.err, StartsWith("verity: PERMISSION_DENIED: "));
}

// `verity key revoke --help`: "Revoking a revoked key changes nothing; NOT_FOUND for an unknown
// KEY_ID." The second revoke succeeds with the same revoked_at.
TEST_F(CliAuthProbeTest, RevokingTwiceChangesNothingAndAnUnknownIdIsNotFound) {
  auto [key, key_id] = NewKey("reader", "");
  CliResult first = As(admin_key_, {"key", "revoke", key_id});
  ASSERT_EQ(first.code, 0) << first.err;
  CliResult second = As(admin_key_, {"key", "revoke", key_id});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_THAT(Field(first.out, "revoked_at"), StartsWith("20"));
  EXPECT_EQ(Field(second.out, "revoked_at"), Field(first.out, "revoked_at"));
  CliResult unknown = As(admin_key_, {"key", "revoke", "0123456789abcdef"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, StartsWith("verity: NOT_FOUND: "));
}

// `verity key list --help`: "With --output=json, an array of key objects as `key create
// --output=json` prints them, without secret_key."
TEST_F(CliAuthProbeTest, KeyListJsonNeverHoldsASecret) {
  auto [key, key_id] = NewKey("writer", "");
  CliResult listed = As(admin_key_, {"key", "list", "--all", "--output=json"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("\"key_id\":\"" + key_id + "\""));
  EXPECT_THAT(listed.out, Not(HasSubstr("secret_key")));
  EXPECT_THAT(listed.out, Not(HasSubstr(key.substr(20))));
}

}  // namespace
}  // namespace verity::tests
