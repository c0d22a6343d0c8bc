#include "client/cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/cli_commands.h"
#include "client/command_line.h"
#include "client/csv_input.h"
#include "client/json_value.h"
#include "client/message_format.h"
#include "client/progress.h"
#include "client/verity_client.h"
#include "common/status_macros.h"
#include "google/protobuf/timestamp.pb.h"
#include "verity/v1/common.pb.h"
#include "verity/v1/keys.pb.h"

namespace verity::client {
namespace {

constexpr const char* kProgram = kCliProgram;

// The deadline of `model train` when --timeout is not given: a fit of a
// neural method on a large project takes minutes.
constexpr absl::Duration kDefaultTrainTimeout = absl::Minutes(30);

// Rejections `submit` prints.
constexpr int kRejectionsShown = 5;

// The longest name of an API key (keys.proto).
constexpr size_t kMaxKeyNameBytes = 256;

// Marks a status as a usage error (exit code 2, hint to --help).
constexpr char kUsagePayload[] = "verity.cli/usage";

// `message` on one line: each run of whitespace holding a line break or a tab (PostgreSQL's
// messages end lines with "\n\t") becomes one space, and trailing whitespace goes.
std::string OnOneLine(absl::string_view message) {
  std::string line;
  line.reserve(message.size());
  for (size_t i = 0; i < message.size();) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(message[i]))) {
      line.push_back(message[i++]);
      continue;
    }
    size_t end = i;
    bool breaks = false;
    while (end < message.size() && absl::ascii_isspace(static_cast<unsigned char>(message[end]))) {
      breaks = breaks || message[end] != ' ';
      ++end;
    }
    if (breaks) {
      line.push_back(' ');
    } else {
      line.append(message.data() + i, end - i);
    }
    i = end;
  }
  return std::string(absl::StripTrailingAsciiWhitespace(line));
}

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

// ---------------------------------------------------------------------------
// Helpers.

struct Context {
  const CommandLine& line;
  const VerityClient& client;
  std::ostream& out;
  std::ostream& err;
  const CliEnvironment& environment;
  // --output=json.
  bool json = false;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  return text.str();
}

// A usage error carrying the message of a bad flag value.
template <typename T>
absl::StatusOr<T> AsUsage(absl::StatusOr<T> value) {
  if (value.ok()) return value;
  return UsageError(value.status().message());
}

std::vector<std::string> Classes(const v1::Project& project) {
  return std::vector<std::string>(project.classes().begin(),
                                  project.classes().end());
}

// The method for people: the server default is spelled out.
std::string FormatMethod(v1::TruthMethod method) {
  if (method == v1::TRUTH_METHOD_UNSPECIFIED) return "default (ds)";
  return MethodName(method);
}

std::string FormatTime(const google::protobuf::Timestamp& timestamp) {
  return FormatTimestamp(timestamp).value_or("-");
}

std::string FormatNumber(double value) {
  return absl::StrFormat("%.6g", value);
}

std::string FormatProbability(double value) {
  return absl::StrFormat("%.4f", value);
}

// A key's projects for people: "*" for a key valid for every project.
std::string FormatKeyProjects(const v1::ApiKey& key) {
  if (key.projects().empty()) return "*";
  return absl::StrJoin(key.projects(), ",");
}

// The characters of UTF-8 `text`: its bytes other than continuation bytes
// (0x80-0xbf). A terminal shows most of them one column wide (East Asian wide
// characters take two, which the tables do not account for).
size_t CharacterCount(const std::string& text) {
  size_t count = 0;
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    count += (byte < 0x80 || byte > 0xbf) ? 1 : 0;
  }
  return count;
}

// Prints rows as columns separated by two spaces, left-aligned, widths
// counted in characters (ids and class names are UTF-8).
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                std::ostream& out) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], CharacterCount(row[c]));
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) {
        line.append(widths[c] - CharacterCount(row[c]) + 2, ' ');
      }
    }
    out << line << "\n";
  }
}

void PrintJson(const Context& context, const JsonValue& value) {
  context.out << value.Serialize() << "\n";
}

void PrintProject(const Context& context, const v1::Project& project) {
  if (context.json) {
    PrintJson(context, ProjectJson(project));
    return;
  }
  std::ostream& out = context.out;
  out << "name: " << project.name() << "\n"
      << "classes: " << absl::StrJoin(project.classes(), ", ") << "\n"
      << "item_feature_dim: " << project.item_feature_dim() << "\n"
      << "annotator_feature_dim: " << project.annotator_feature_dim() << "\n"
      << "method: " << FormatMethod(project.settings().model().method())
      << "\n";
  v1::ProjectSettings other_settings = project.settings();
  other_settings.mutable_model()->clear_method();
  if (other_settings.model().ByteSizeLong() == 0) {
    other_settings.clear_model();
  }
  if (other_settings.ByteSizeLong() > 0) {
    out << "settings: " << other_settings.ShortDebugString() << "\n";
  }
  out << "created_at: " << FormatTime(project.created_at()) << "\n"
      << "items: " << project.num_items() << "\n"
      << "annotators: " << project.num_annotators() << "\n"
      << "labels: " << project.num_labels() << "\n"
      << "revisions: " << project.num_revisions() << "\n";
}

// The lines of one model version, each prefixed by `indent`.
void PrintVersion(const v1::ModelVersion& version, absl::string_view indent,
                  std::ostream& out) {
  out << indent << "version: " << version.version() << "\n"
      << indent << "method: " << FormatMethod(version.method()) << "\n"
      << indent << "watermark: " << version.watermark() << "\n"
      << indent << "num_labels: " << version.num_labels() << "\n"
      << indent << "log_likelihood: " << FormatNumber(version.log_likelihood())
      << "\n"
      << indent << "iterations: " << version.iterations() << "\n"
      << indent << "duration_ms: " << FormatNumber(version.duration_ms())
      << "\n"
      << indent << "created_at: " << FormatTime(version.created_at()) << "\n";
}

void PrintAddTotals(const Context& context, const AddItemsTotals& totals) {
  if (context.json) {
    PrintJson(context, JsonValue::Object()
                           .Set("added", totals.added)
                           .Set("updated", totals.updated));
    return;
  }
  context.out << "added=" << totals.added << " updated=" << totals.updated
              << "\n";
}

// The project's label parser (fetches the project).
absl::StatusOr<std::pair<v1::Project, LabelParser>> ProjectAndLabels(
    const Context& context) {
  VERITY_ASSIGN_OR_RETURN(
      v1::Project project,
      context.client.GetProject(context.line.GetString("project")));
  LabelParser labels(Classes(project));
  return std::make_pair(std::move(project), std::move(labels));
}

// Reads all posteriors of a project, page by page, calling `on_page`.
template <typename OnPage>
absl::Status ForEachPosteriorPage(const Context& context,
                                  absl::string_view project, int32_t page_size,
                                  OnPage on_page) {
  std::string token;
  while (true) {
    VERITY_ASSIGN_OR_RETURN(
        v1::ListPosteriorsResponse page,
        context.client.ListPosteriors(project, page_size, token));
    VERITY_RETURN_IF_ERROR(on_page(page));
    if (page.next_page_token().empty()) return absl::OkStatus();
    if (page.next_page_token() == token) {
      return absl::InternalError(absl::StrCat(
          "ListPosteriors returned the same page token \"", token, "\" twice"));
    }
    token = page.next_page_token();
  }
}

// Where a command's main output goes: stdout, or with --out=FILE a sibling
// FILE.partial renamed over FILE by Commit, so that a command that fails
// leaves an existing FILE as it was (the destructor removes an uncommitted
// partial file).
class OutputTarget {
 public:
  // INVALID_ARGUMENT-free: an unwritable FILE is the errno's status.
  static absl::StatusOr<std::unique_ptr<OutputTarget>> Open(
      const std::string& path, std::ostream& standard_output) {
    std::unique_ptr<OutputTarget> target(
        new OutputTarget(path, standard_output));
    if (!path.empty()) {
      target->file_.open(target->partial_path_,
                         std::ios::binary | std::ios::trunc);
      if (!target->file_) {
        return absl::ErrnoToStatus(
            errno, absl::StrCat("cannot write ", target->partial_path_));
      }
    }
    return target;
  }

  ~OutputTarget() {
    if (to_file() && !committed_) {
      file_.close();
      std::remove(partial_path_.c_str());
    }
  }

  std::ostream& stream() { return to_file() ? file_ : standard_output_; }
  bool to_file() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Flushes and checks the stream, then renames the partial file over FILE.
  absl::Status Commit() {
    std::ostream& out = stream();
    out.flush();
    if (!out) {
      return absl::ErrnoToStatus(
          errno,
          absl::StrCat("cannot write ", to_file() ? partial_path_ : "stdout"));
    }
    if (!to_file()) return absl::OkStatus();
    file_.close();
    if (std::rename(partial_path_.c_str(), path_.c_str()) != 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot rename ", partial_path_, " to ", path_));
    }
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  OutputTarget(std::string path, std::ostream& standard_output)
      : path_(std::move(path)),
        partial_path_(absl::StrCat(path_, ".partial")),
        standard_output_(standard_output) {}

  const std::string path_;
  const std::string partial_path_;
  std::ostream& standard_output_;
  std::ofstream file_;
  bool committed_ = false;
};

enum class PosteriorFormat {
  kCsv,        // `posteriors`: item, label, confidence, p_*, num_labels.
  kExportCsv,  // `export --format=csv`: every field, exact numbers.
  kJsonLines,  // `export --format=jsonl`.
  kJsonArray,  // `posteriors --output=json`.
};

// Writes posteriors in one format. The CSV header (or the opening bracket)
// goes out with the first posterior or at Finish, so a command that fails
// before its first posterior writes nothing.
class PosteriorWriter {
 public:
  PosteriorWriter(std::ostream& out, PosteriorFormat format,
                  std::vector<std::string> classes)
      : out_(out), format_(format), classes_(std::move(classes)), array_(out) {}

  void Write(const v1::Posterior& posterior) {
    WriteHeader();
    switch (format_) {
      case PosteriorFormat::kCsv: {
        std::vector<std::string> fields = {
            SpreadsheetSafeCell(posterior.item()),
            SpreadsheetSafeCell(ClassName(classes_, posterior.map_label())),
            FormatNumber(posterior.confidence())};
        for (double p : posterior.probabilities()) {
          fields.push_back(FormatNumber(p));
        }
        fields.push_back(absl::StrCat(posterior.num_labels()));
        out_ << FormatCsvRecord(fields) << "\n";
        break;
      }
      case PosteriorFormat::kExportCsv:
        out_ << FormatCsvRecord(PosteriorExportFields(posterior, classes_))
             << "\n";
        break;
      case PosteriorFormat::kJsonLines:
        out_ << PosteriorJson(posterior, classes_).Serialize() << "\n";
        break;
      case PosteriorFormat::kJsonArray:
        array_.Add(PosteriorJson(posterior, classes_));
        break;
    }
    ++written_;
  }

  void Finish() {
    WriteHeader();
    if (format_ == PosteriorFormat::kJsonArray) array_.Finish();
  }

  int64_t written() const { return written_; }

 private:
  void WriteHeader() {
    if (header_written_) return;
    header_written_ = true;
    if (format_ == PosteriorFormat::kCsv) {
      std::vector<std::string> fields = {"item", "label", "confidence"};
      for (const std::string& name : classes_) {
        fields.push_back(absl::StrCat("p_", name));
      }
      fields.push_back("num_labels");
      out_ << FormatCsvRecord(fields) << "\n";
    } else if (format_ == PosteriorFormat::kExportCsv) {
      out_ << FormatCsvRecord(PosteriorExportHeader(classes_)) << "\n";
    }
  }

  std::ostream& out_;
  const PosteriorFormat format_;
  const std::vector<std::string> classes_;
  JsonArrayWriter array_;
  bool header_written_ = false;
  int64_t written_ = 0;
};

// Writes the posteriors of `items` (every item of the project, page by page,
// when null) to stdout or --out in `format`, with a progress meter on stderr
// when it is a terminal and the posteriors do not go to one.
absl::Status WritePosteriors(const Context& context, PosteriorFormat format,
                             const std::vector<std::string>* items) {
  const CommandLine& line = context.line;
  VERITY_ASSIGN_OR_RETURN(
      int64_t page_size,
      AsUsage(line.GetInt("page_size", 1, VerityClient::kMaxItemsPerCall)));
  VERITY_ASSIGN_OR_RETURN(v1::Project project,
                          context.client.GetProject(line.GetString("project")));
  VERITY_ASSIGN_OR_RETURN(
      std::unique_ptr<OutputTarget> target,
      OutputTarget::Open(line.GetString("out"), context.out));
  PosteriorWriter writer(target->stream(), format, Classes(project));

  if (items != nullptr) {
    VERITY_ASSIGN_OR_RETURN(
        std::vector<v1::Posterior> posteriors,
        context.client.GetPosteriors(project.name(), *items));
    for (const v1::Posterior& posterior : posteriors) writer.Write(posterior);
  } else {
    std::optional<ProgressMeter> meter;
    if (context.environment.show_progress &&
        (target->to_file() || !context.environment.stdout_is_terminal)) {
      ProgressMeter::Options options;
      options.unit = "items";
      meter.emplace(context.err, project.num_items(), std::move(options));
    }
    absl::Status status = ForEachPosteriorPage(
        context, project.name(), static_cast<int32_t>(page_size),
        [&](const v1::ListPosteriorsResponse& page) {
          for (const v1::Posterior& posterior : page.posteriors()) {
            writer.Write(posterior);
          }
          if (meter.has_value()) meter->Update(writer.written());
          return absl::OkStatus();
        });
    if (meter.has_value()) meter->Finish();
    VERITY_RETURN_IF_ERROR(status);
  }
  writer.Finish();
  VERITY_RETURN_IF_ERROR(target->Commit());
  if (target->to_file()) {
    if (context.json) {
      PrintJson(context, JsonValue::Object()
                             .Set("out", target->path())
                             .Set("posteriors", writer.written()));
    } else {
      context.out << "wrote " << writer.written() << " posteriors to "
                  << target->path() << "\n";
    }
  }
  return absl::OkStatus();
}

// Applies the ProjectSettingsFlags given on the command line to `settings`;
// returns how many were given.
absl::StatusOr<int> ApplySettingsFlags(const CommandLine& line,
                                       v1::ProjectSettings& settings) {
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  constexpr double kMaxDouble = std::numeric_limits<double>::max();
  int given = 0;
  v1::ModelSettings& model = *settings.mutable_model();
  v1::AssignmentSettings& assignment = *settings.mutable_assignment();
  v1::ProjectLimits& limits = *settings.mutable_limits();
  auto limit_flag = [&](absl::string_view name, auto set) -> absl::Status {
    if (!line.Has(name)) return absl::OkStatus();
    ++given;
    VERITY_ASSIGN_OR_RETURN(
        int64_t value, AsUsage(line.GetInt(name, 0, std::numeric_limits<int64_t>::max())));
    set(value);
    return absl::OkStatus();
  };
  auto int_flag = [&](absl::string_view name, auto set) -> absl::Status {
    if (!line.Has(name)) return absl::OkStatus();
    ++given;
    VERITY_ASSIGN_OR_RETURN(int64_t value,
                            AsUsage(line.GetInt(name, 0, kMaxInt32)));
    set(static_cast<int32_t>(value));
    return absl::OkStatus();
  };
  auto double_flag = [&](absl::string_view name, double max,
                         auto set) -> absl::Status {
    if (!line.Has(name)) return absl::OkStatus();
    ++given;
    VERITY_ASSIGN_OR_RETURN(double value,
                            AsUsage(line.GetDouble(name, 0, max)));
    set(value);
    return absl::OkStatus();
  };
  if (line.Has("method")) {
    ++given;
    const std::string name = line.GetString("method");
    // "default" names the server's default for new projects, auto: an unset method would keep
    // the project's (UpdateProjectSettings), so a reset must name it.
    std::optional<v1::TruthMethod> method =
        name == "default" ? v1::TRUTH_METHOD_AUTO : MethodFromName(name);
    if (!method.has_value()) {
      return UsageError(absl::StrCat("--method=", name, ": expected one of ",
                                     absl::StrJoin(MethodNames(), ", "),
                                     ", default"));
    }
    model.set_method(*method);
  }
  VERITY_RETURN_IF_ERROR(
      double_flag("confusion_smoothing", kMaxDouble,
                  [&](double v) { model.set_confusion_smoothing(v); }));
  VERITY_RETURN_IF_ERROR(
      double_flag("prior_smoothing", kMaxDouble,
                  [&](double v) { model.set_prior_smoothing(v); }));
  VERITY_RETURN_IF_ERROR(int_flag(
      "max_iterations", [&](int32_t v) { model.set_max_iterations(v); }));
  VERITY_RETURN_IF_ERROR(
      double_flag("tolerance", 1, [&](double v) { model.set_tolerance(v); }));
  VERITY_RETURN_IF_ERROR(int_flag("refit_min_new_labels", [&](int32_t v) {
    model.set_refit_min_new_labels(v);
  }));
  VERITY_RETURN_IF_ERROR(
      double_flag("refit_new_label_fraction", kMaxDouble,
                  [&](double v) { model.set_refit_new_label_fraction(v); }));
  if (line.Has("calibration")) {
    ++given;
    const std::string name = line.GetString("calibration");
    if (name != "auto" && name != "none" && name != "default") {
      return UsageError(
          absl::StrCat("--calibration=", name, ": expected auto, none or default"));
    }
    model.set_calibration(name == "default" ? "" : name);
  }
  VERITY_RETURN_IF_ERROR(int_flag("min_labels_per_item", [&](int32_t v) {
    assignment.set_min_labels_per_item(v);
  }));
  VERITY_RETURN_IF_ERROR(int_flag("max_labels_per_item", [&](int32_t v) {
    assignment.set_max_labels_per_item(v);
  }));
  VERITY_RETURN_IF_ERROR(double_flag("confidence_target", 1, [&](double v) {
    assignment.set_confidence_target(v);
  }));
  VERITY_RETURN_IF_ERROR(int_flag(
      "lease_seconds", [&](int32_t v) { assignment.set_lease_seconds(v); }));
  if (line.Has("policy")) {
    ++given;
    const std::string name = line.GetString("policy");
    std::optional<v1::AssignmentPolicy> policy = PolicyFromName(name);
    if (!policy.has_value()) {
      return UsageError(absl::StrCat("--policy=", name, ": expected one of ",
                                     absl::StrJoin(PolicyNames(), ", ")));
    }
    assignment.set_policy(*policy);
  }
  VERITY_RETURN_IF_ERROR(int_flag(
      "gold_items_for_new_annotators",
      [&](int32_t v) { assignment.set_gold_items_for_new_annotators(v); }));
  VERITY_RETURN_IF_ERROR(limit_flag("max_items", [&](int64_t v) { limits.set_max_items(v); }));
  VERITY_RETURN_IF_ERROR(
      limit_flag("max_annotators", [&](int64_t v) { limits.set_max_annotators(v); }));
  VERITY_RETURN_IF_ERROR(limit_flag("max_labels", [&](int64_t v) { limits.set_max_labels(v); }));
  VERITY_RETURN_IF_ERROR(
      limit_flag("max_confusion_cells", [&](int64_t v) { limits.set_max_confusion_cells(v); }));
  VERITY_RETURN_IF_ERROR(
      limit_flag("max_feature_values", [&](int64_t v) { limits.set_max_feature_values(v); }));
  VERITY_RETURN_IF_ERROR(
      limit_flag("max_revisions", [&](int64_t v) { limits.set_max_revisions(v); }));
  if (model.ByteSizeLong() == 0) settings.clear_model();
  if (assignment.ByteSizeLong() == 0) settings.clear_assignment();
  if (limits.ByteSizeLong() == 0) settings.clear_limits();
  return given;
}

// ---------------------------------------------------------------------------
// Commands.

absl::Status ProjectCreate(const Context& context) {
  const CommandLine& line = context.line;
  v1::Project project;
  project.set_name(line.args()[0]);
  if (line.Has("classes") == line.Has("classes_file")) {
    return UsageError(
        "\"project create\" needs exactly one of --classes and "
        "--classes_file");
  }
  std::vector<std::string> classes;
  if (line.Has("classes")) {
    absl::StatusOr<std::vector<std::string>> parsed =
        ParseClassList(line.GetString("classes"));
    if (!parsed.ok()) {
      return UsageError(absl::StrCat("--classes: ", parsed.status().message()));
    }
    classes = *std::move(parsed);
  } else {
    const std::string file = line.GetString("classes_file");
    VERITY_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
    VERITY_ASSIGN_OR_RETURN(classes, ParseClassesFile(text, file));
  }
  for (std::string& name : classes) project.add_classes(std::move(name));
  VERITY_ASSIGN_OR_RETURN(int64_t item_dim,
                          AsUsage(line.GetInt("item_feature_dim", 0, 65536)));
  VERITY_ASSIGN_OR_RETURN(
      int64_t annotator_dim,
      AsUsage(line.GetInt("annotator_feature_dim", 0, 65536)));
  project.set_item_feature_dim(static_cast<int32_t>(item_dim));
  project.set_annotator_feature_dim(static_cast<int32_t>(annotator_dim));
  VERITY_RETURN_IF_ERROR(
      ApplySettingsFlags(line, *project.mutable_settings()).status());
  if (project.settings().ByteSizeLong() == 0) project.clear_settings();
  VERITY_ASSIGN_OR_RETURN(v1::Project created,
                          context.client.CreateProject(project));
  PrintProject(context, created);
  return absl::OkStatus();
}

absl::Status ProjectList(const Context& context) {
  VERITY_ASSIGN_OR_RETURN(std::vector<v1::Project> projects,
                          context.client.ListProjects());
  if (context.json) {
    JsonArrayWriter array(context.out);
    for (const v1::Project& project : projects) {
      array.Add(ProjectJson(project));
    }
    array.Finish();
    return absl::OkStatus();
  }
  if (projects.empty()) {
    context.out << "no projects\n";
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "CLASSES", "ITEMS", "ANNOTATORS", "LABELS", "METHOD"}};
  for (const v1::Project& project : projects) {
    rows.push_back({project.name(), absl::StrCat(project.classes_size()),
                    absl::StrCat(project.num_items()),
                    absl::StrCat(project.num_annotators()),
                    absl::StrCat(project.num_labels()),
                    FormatMethod(project.settings().model().method())});
  }
  PrintTable(rows, context.out);
  return absl::OkStatus();
}

absl::Status ProjectShow(const Context& context) {
  VERITY_ASSIGN_OR_RETURN(v1::Project project,
                          context.client.GetProject(context.line.args()[0]));
  PrintProject(context, project);
  return absl::OkStatus();
}

absl::Status ProjectSettings(const Context& context) {
  const std::string name = context.line.args()[0];
  // Check the flags before the first call.
  v1::ProjectSettings scratch;
  VERITY_ASSIGN_OR_RETURN(int given, ApplySettingsFlags(context.line, scratch));
  if (given == 0) {
    return UsageError(
        "\"project settings\" needs at least one setting flag, e.g. "
        "--method=ds");
  }
  VERITY_ASSIGN_OR_RETURN(v1::Project project, context.client.GetProject(name));
  v1::ProjectSettings settings = project.settings();
  VERITY_RETURN_IF_ERROR(ApplySettingsFlags(context.line, settings).status());
  VERITY_ASSIGN_OR_RETURN(v1::Project updated,
                          context.client.UpdateProjectSettings(name, settings));
  PrintProject(context, updated);
  return absl::OkStatus();
}

absl::Status ItemAdd(const Context& context) {
  const CommandLine& line = context.line;
  if (!line.Has("csv") && !line.Has("gold_csv")) {
    return UsageError("\"item add\" needs --csv=FILE or --gold_csv=FILE");
  }
  VERITY_ASSIGN_OR_RETURN(auto project_and_labels, ProjectAndLabels(context));
  const auto& [project, labels] = project_and_labels;
  ItemRows items;
  if (line.Has("csv")) {
    const std::string file = line.GetString("csv");
    VERITY_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
    VERITY_ASSIGN_OR_RETURN(items, ParseItemsCsv(text, file, labels));
    if (items.feature_dim > 0 &&
        items.feature_dim != project.item_feature_dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": ", items.feature_dim,
                       " feature columns, but project \"", project.name(),
                       "\" has item_feature_dim ", project.item_feature_dim()));
    }
  }
  if (line.Has("gold_csv")) {
    const std::string file = line.GetString("gold_csv");
    VERITY_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
    VERITY_ASSIGN_OR_RETURN(ItemRows gold, ParseItemsCsv(text, file, labels));
    VERITY_ASSIGN_OR_RETURN(items, MergeGold(std::move(items), gold, file));
  }
  VERITY_ASSIGN_OR_RETURN(AddItemsTotals totals,
                          context.client.AddItems(project.name(), items.items));
  PrintAddTotals(context, totals);
  return absl::OkStatus();
}

absl::Status AnnotatorAdd(const Context& context) {
  VERITY_ASSIGN_OR_RETURN(
      v1::Project project,
      context.client.GetProject(context.line.GetString("project")));
  const std::string file = context.line.GetString("csv");
  VERITY_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  VERITY_ASSIGN_OR_RETURN(AnnotatorRows rows, ParseAnnotatorsCsv(text, file));
  if (rows.feature_dim > 0 &&
      rows.feature_dim != project.annotator_feature_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": ", rows.feature_dim, " feature columns, but project \"",
        project.name(), "\" has annotator_feature_dim ",
        project.annotator_feature_dim()));
  }
  VERITY_ASSIGN_OR_RETURN(
      AddItemsTotals totals,
      context.client.AddAnnotators(project.name(), rows.annotators));
  PrintAddTotals(context, totals);
  return absl::OkStatus();
}

absl::Status Submit(const Context& context) {
  const CommandLine& line = context.line;
  VERITY_ASSIGN_OR_RETURN(
      int64_t batch_size,
      AsUsage(line.GetInt("batch_size", 1, VerityClient::kMaxItemsPerCall)));
  VERITY_ASSIGN_OR_RETURN(auto project_and_labels, ProjectAndLabels(context));
  const auto& [project, labels] = project_and_labels;
  const std::string file = line.GetString("csv");
  VERITY_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  VERITY_ASSIGN_OR_RETURN(AnnotationRows rows,
                          ParseAnnotationsCsv(text, file, labels));
  text.clear();
  text.shrink_to_fit();

  SubmitOptions options;
  options.batch_size = static_cast<int>(batch_size);
  options.max_rejections = kRejectionsShown;
  std::optional<ProgressMeter> meter;
  if (context.environment.show_progress) {
    meter.emplace(context.err, static_cast<int64_t>(rows.annotations.size()),
                  ProgressMeter::Options());
    options.on_progress = [&meter](const SubmitProgress& progress) {
      meter->Update(progress.acked);
    };
  }
  absl::StatusOr<SubmitTotals> totals = context.client.SubmitAnnotations(
      project.name(), rows.annotations, options);
  if (meter.has_value()) meter->Finish();
  if (!totals.ok()) return totals.status();

  // A rejection names the CSV line of its annotation when the server's index
  // is in range.
  auto in_range = [&rows](const SubmitRejection& rejection) {
    return rejection.index >= 0 &&
           rejection.index < static_cast<int64_t>(rows.annotations.size());
  };
  if (context.json) {
    JsonValue rejections = JsonValue::Array();
    for (const SubmitRejection& rejection : totals->rejections) {
      JsonValue entry = JsonValue::Object();
      if (in_range(rejection)) {
        const v1::Annotation& annotation = rows.annotations[rejection.index];
        entry.Set("line", rows.lines[rejection.index])
            .Set("item", annotation.item())
            .Set("annotator", annotation.annotator());
      } else {
        entry.Set("line", JsonValue())
            .Set("item", JsonValue())
            .Set("annotator", JsonValue());
      }
      entry.Set("reason", rejection.reason);
      rejections.Append(std::move(entry));
    }
    PrintJson(context, JsonValue::Object()
                           .Set("accepted", totals->accepted)
                           .Set("duplicate", totals->duplicate)
                           .Set("revised", totals->revised)
                           .Set("stale", totals->stale)
                           .Set("rejected", totals->rejected)
                           .Set("rejections", std::move(rejections))
                           .Set("retries", totals->retries));
    return absl::OkStatus();
  }
  context.out << "accepted=" << totals->accepted
              << " duplicate=" << totals->duplicate
              << " revised=" << totals->revised
              << " stale=" << totals->stale
              << " rejected=" << totals->rejected << "\n";
  for (const SubmitRejection& rejection : totals->rejections) {
    if (!in_range(rejection)) {
      context.out << "  rejected: " << rejection.reason << "\n";
      continue;
    }
    const v1::Annotation& annotation = rows.annotations[rejection.index];
    context.out << "  rejected " << file << " line "
                << rows.lines[rejection.index] << " (item \""
                << annotation.item() << "\", annotator \""
                << annotation.annotator() << "\"): " << rejection.reason
                << "\n";
  }
  const int64_t not_shown =
      totals->rejected - static_cast<int64_t>(totals->rejections.size());
  if (not_shown > 0) {
    context.out << "  (" << not_shown << " more rejections not shown)\n";
  }
  if (totals->retries > 0) {
    context.err << kProgram << ": note: reopened the stream " << totals->retries
                << " time(s) after retryable errors\n";
  }
  return absl::OkStatus();
}

absl::Status Posteriors(const Context& context) {
  const PosteriorFormat format =
      context.json ? PosteriorFormat::kJsonArray : PosteriorFormat::kCsv;
  if (context.line.Has("items")) {
    const std::vector<std::string> items = context.line.GetList("items");
    return WritePosteriors(context, format, &items);
  }
  return WritePosteriors(context, format, nullptr);
}

absl::Status Export(const Context& context) {
  const std::string format = context.line.GetString("format");
  if (format == "csv") {
    return WritePosteriors(context, PosteriorFormat::kExportCsv, nullptr);
  }
  if (format == "jsonl") {
    return WritePosteriors(context, PosteriorFormat::kJsonLines, nullptr);
  }
  return UsageError(
      absl::StrCat("--format=", format, ": expected csv or jsonl"));
}

void PrintConfusion(absl::Span<const std::string> classes,
                    const v1::ConfusionMatrix& confusion, std::ostream& out) {
  const int k = confusion.num_classes();
  if (k <= 0 || confusion.probabilities_size() != k * k) {
    out << "confusion: none\n";
    return;
  }
  out << "confusion (rows: true class, columns: answered class):\n";
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {" "};
  for (int l = 0; l < k; ++l) header.push_back(ClassName(classes, l));
  rows.push_back(std::move(header));
  for (int t = 0; t < k; ++t) {
    std::vector<std::string> row = {ClassName(classes, t)};
    for (int l = 0; l < k; ++l) {
      row.push_back(FormatProbability(confusion.probabilities(t * k + l)));
    }
    rows.push_back(std::move(row));
  }
  std::ostringstream table;
  PrintTable(rows, table);
  for (absl::string_view row :
       absl::StrSplit(table.str(), '\n', absl::SkipEmpty())) {
    out << "  " << row << "\n";
  }
}

// Profiles of `ids` (every annotator when empty): a table, or with
// `confusion` each profile with its matrix.
absl::Status PrintProfiles(const Context& context,
                           const std::vector<std::string>& ids,
                           bool confusion) {
  VERITY_ASSIGN_OR_RETURN(
      v1::Project project,
      context.client.GetProject(context.line.GetString("project")));
  VERITY_ASSIGN_OR_RETURN(
      std::vector<v1::AnnotatorProfile> profiles,
      context.client.GetAnnotatorProfiles(project.name(), ids));
  const std::vector<std::string> classes = Classes(project);
  if (context.json) {
    JsonArrayWriter array(context.out);
    for (const v1::AnnotatorProfile& profile : profiles) {
      array.Add(AnnotatorProfileJson(profile, classes));
    }
    array.Finish();
    return absl::OkStatus();
  }
  if (!confusion) {
    std::vector<std::vector<std::string>> rows = {
        {"ANNOTATOR", "LABELS", "ACCURACY"}};
    for (const v1::AnnotatorProfile& profile : profiles) {
      rows.push_back({profile.annotator(), absl::StrCat(profile.num_labels()),
                      FormatProbability(profile.accuracy())});
    }
    PrintTable(rows, context.out);
    return absl::OkStatus();
  }
  bool first = true;
  for (const v1::AnnotatorProfile& profile : profiles) {
    if (!first) context.out << "\n";
    first = false;
    context.out << "annotator: " << profile.annotator() << "\n"
                << "num_labels: " << profile.num_labels() << "\n"
                << "accuracy: " << FormatProbability(profile.accuracy())
                << (profile.predicted_from_features() ? " (predicted from its features)" : "")
                << "\n";
    if (profile.embedding_size() > 0) {  // lia, conal
      std::vector<std::string> values;
      for (float v : profile.embedding()) values.push_back(FormatNumber(v));
      context.out << "embedding: " << absl::StrJoin(values, " ") << "\n";
    }
    PrintConfusion(classes, profile.confusion(), context.out);
  }
  return absl::OkStatus();
}

absl::Status AnnotatorList(const Context& context) {
  return PrintProfiles(context, {}, context.line.GetBool("confusion"));
}

absl::Status AnnotatorShow(const Context& context) {
  return PrintProfiles(context, context.line.args(), /*confusion=*/true);
}

// `annotator [ID ...]`: list without IDs, show with them.
absl::Status Annotator(const Context& context) {
  const std::vector<std::string>& ids = context.line.args();
  return PrintProfiles(context, ids,
                       !ids.empty() || context.line.GetBool("confusion"));
}

absl::Status ModelStatus(const Context& context) {
  const std::string project = context.line.GetString("project");
  VERITY_ASSIGN_OR_RETURN(v1::GetModelStatusResponse status,
                          context.client.GetModelStatus(project));
  if (context.json) {
    PrintJson(context, ModelStatusJson(project, status));
    return absl::OkStatus();
  }
  std::ostream& out = context.out;
  out << "project: " << project << "\n"
      << "method: " << FormatMethod(status.method()) << "\n"
      << "num_labels: " << status.num_labels() << "\n"
      << "labels_since_version: " << status.labels_since_version() << "\n"
      << "training: " << (status.training() ? "true" : "false") << "\n";
  if (status.has_current_version()) {
    out << "current_version:\n";
    PrintVersion(status.current_version(), "  ", out);
  } else {
    out << "current_version: none (no fit yet)\n";
  }
  if (status.has_calibration()) {
    const v1::PosteriorCalibration& c = status.calibration();
    out << "calibration:\n"
        << "  kind: " << c.kind() << "\n"
        << "  temperature: " << c.temperature() << "\n"
        << "  source: " << c.source() << "\n";
    if (c.source() == "gold") {
      out << "  gold_items: " << c.gold_items() << "\n"
          << "  gold_ece_raw: " << c.gold_ece_raw() << "\n"
          << "  gold_ece: " << c.gold_ece() << "\n";
    }
  }
  if (!status.chosen_method().empty()) {
    out << "chosen_method: " << status.chosen_method() << "\n"
        << "choice_reason: " << status.choice_reason() << "\n";
  }
  return absl::OkStatus();
}

absl::Status ModelVersions(const Context& context) {
  VERITY_ASSIGN_OR_RETURN(int64_t limit,
                          AsUsage(context.line.GetInt("limit", 1, 1000)));
  VERITY_ASSIGN_OR_RETURN(
      std::vector<v1::ModelVersion> versions,
      context.client.ListModelVersions(context.line.GetString("project"),
                                       static_cast<int32_t>(limit)));
  if (context.json) {
    JsonArrayWriter array(context.out);
    for (const v1::ModelVersion& version : versions) {
      array.Add(ModelVersionJson(version));
    }
    array.Finish();
    return absl::OkStatus();
  }
  if (versions.empty()) {
    context.out << "no model versions yet\n";
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {
      {"VERSION", "METHOD", "LABELS", "WATERMARK", "ITERATIONS",
       "LOG_LIKELIHOOD", "DURATION_MS", "CREATED_AT"}};
  for (const v1::ModelVersion& version : versions) {
    rows.push_back(
        {absl::StrCat(version.version()), FormatMethod(version.method()),
         absl::StrCat(version.num_labels()), absl::StrCat(version.watermark()),
         absl::StrCat(version.iterations()),
         FormatNumber(version.log_likelihood()),
         FormatNumber(version.duration_ms()),
         FormatTime(version.created_at())});
  }
  PrintTable(rows, context.out);
  return absl::OkStatus();
}

absl::Status ModelTrain(const Context& context) {
  const std::string project = context.line.GetString("project");
  absl::Duration deadline = kDefaultTrainTimeout;
  if (context.line.Has("timeout")) {
    VERITY_ASSIGN_OR_RETURN(deadline,
                            AsUsage(context.line.GetDuration("timeout")));
  }
  std::optional<ElapsedTicker> ticker;
  if (context.environment.show_progress) {
    ticker.emplace(context.err, absl::StrCat("training ", project, ":"));
  }
  absl::StatusOr<v1::ModelVersion> version =
      context.client.TrainModel(project, deadline);
  if (ticker.has_value()) ticker->Finish();
  if (!version.ok()) return version.status();
  if (context.json) {
    PrintJson(context, ModelVersionJson(*version));
    return absl::OkStatus();
  }
  PrintVersion(*version, "", context.out);
  return absl::OkStatus();
}

absl::Status SuggestItems(const Context& context) {
  const CommandLine& line = context.line;
  VERITY_ASSIGN_OR_RETURN(int64_t k, AsUsage(line.GetInt("k", 1, 1000)));
  const std::string annotator = line.GetString("annotator");
  VERITY_ASSIGN_OR_RETURN(
      std::vector<v1::ItemSuggestion> suggestions,
      context.client.SuggestItems(line.GetString("project"), annotator,
                                  static_cast<int32_t>(k),
                                  line.GetList("candidates")));
  if (context.json) {
    JsonArrayWriter array(context.out);
    for (const v1::ItemSuggestion& suggestion : suggestions) {
      array.Add(ItemSuggestionJson(suggestion));
    }
    array.Finish();
    return absl::OkStatus();
  }
  if (suggestions.empty()) {
    context.out << "no open items for annotator \"" << annotator << "\"\n";
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {
      {"ITEM", "SCORE", "P_CORRECT", "LEASE_EXPIRES_AT"}};
  for (const v1::ItemSuggestion& suggestion : suggestions) {
    rows.push_back({suggestion.item(), FormatNumber(suggestion.score()),
                    FormatProbability(suggestion.p_correct()),
                    FormatTime(suggestion.lease_expires_at())});
  }
  PrintTable(rows, context.out);
  return absl::OkStatus();
}

absl::Status SuggestAnnotators(const Context& context) {
  const CommandLine& line = context.line;
  VERITY_ASSIGN_OR_RETURN(int64_t k, AsUsage(line.GetInt("k", 1, 1000)));
  const std::string item = line.GetString("item");
  VERITY_ASSIGN_OR_RETURN(
      std::vector<v1::AnnotatorSuggestion> suggestions,
      context.client.SuggestAnnotators(line.GetString("project"), item,
                                       static_cast<int32_t>(k),
                                       line.GetList("candidates")));
  if (context.json) {
    JsonArrayWriter array(context.out);
    for (const v1::AnnotatorSuggestion& suggestion : suggestions) {
      array.Add(AnnotatorSuggestionJson(suggestion));
    }
    array.Finish();
    return absl::OkStatus();
  }
  if (suggestions.empty()) {
    context.out << "no annotators to suggest for item \"" << item << "\"\n";
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {
      {"ANNOTATOR", "SCORE", "P_CORRECT"}};
  for (const v1::AnnotatorSuggestion& suggestion : suggestions) {
    rows.push_back({suggestion.annotator(), FormatNumber(suggestion.score()),
                    FormatProbability(suggestion.p_correct())});
  }
  PrintTable(rows, context.out);
  return absl::OkStatus();
}

absl::Status Accuracy(const Context& context) {
  VERITY_ASSIGN_OR_RETURN(auto project_and_labels, ProjectAndLabels(context));
  const auto& [project, labels] = project_and_labels;
  const std::string file = context.line.GetString("gold_csv");
  VERITY_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  VERITY_ASSIGN_OR_RETURN(ItemRows rows, ParseItemsCsv(text, file, labels));
  absl::flat_hash_map<std::string, int32_t> gold;
  for (size_t i = 0; i < rows.items.size(); ++i) {
    if (!rows.items[i].has_gold_label()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": line ", rows.lines[i], ": item \"",
                       rows.items[i].id(), "\" has no gold label"));
    }
    gold.emplace(rows.items[i].id(), rows.items[i].gold_label());
  }
  int64_t scored = 0, correct = 0, unlabelled = 0, clamped = 0, found = 0;
  VERITY_RETURN_IF_ERROR(ForEachPosteriorPage(
      context, project.name(), VerityClient::kMaxItemsPerCall,
      [&](const v1::ListPosteriorsResponse& page) {
        for (const v1::Posterior& posterior : page.posteriors()) {
          auto it = gold.find(posterior.item());
          if (it == gold.end()) continue;
          ++found;
          if (posterior.is_gold()) {
            ++clamped;
          } else if (posterior.num_labels() == 0) {
            ++unlabelled;
          } else {
            ++scored;
            if (posterior.map_label() == it->second) ++correct;
          }
        }
        return absl::OkStatus();
      }));
  const int64_t missing = static_cast<int64_t>(gold.size()) - found;
  std::vector<std::string> skipped;
  if (unlabelled > 0) {
    skipped.push_back(absl::StrCat(unlabelled, " without labels"));
  }
  if (clamped > 0) {
    skipped.push_back(absl::StrCat(clamped, " clamped to gold by item add"));
  }
  if (missing > 0) {
    skipped.push_back(absl::StrCat(missing, " not in the project"));
  }
  if (scored == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no gold item of ", file, " can be scored in project \"",
                     project.name(), "\": ", absl::StrJoin(skipped, ", ")));
  }
  const double accuracy = static_cast<double>(correct) / scored;
  if (context.json) {
    PrintJson(context,
              JsonValue::Object()
                  .Set("accuracy", accuracy)
                  .Set("gold_items", scored)
                  .Set("skipped", JsonValue::Object()
                                      .Set("without_labels", unlabelled)
                                      .Set("clamped_to_gold", clamped)
                                      .Set("not_in_project", missing)));
    return absl::OkStatus();
  }
  context.out << "accuracy=" << FormatProbability(accuracy) << " (" << scored
              << " gold items)\n";
  if (!skipped.empty()) {
    context.out << "skipped gold items: " << absl::StrJoin(skipped, ", ")
                << "\n";
  }
  return absl::OkStatus();
}

// The lines of one API key (`key create` after its secret, `key revoke`).
void PrintKey(const Context& context, const v1::ApiKey& key) {
  context.out << "key_id: " << key.key_id() << "\n"
              << "name: " << key.name() << "\n"
              << "role: " << RoleName(key.role()) << "\n"
              << "projects: " << FormatKeyProjects(key) << "\n"
              << "created_at: " << FormatTime(key.created_at()) << "\n"
              << "revoked_at: " << FormatTime(key.revoked_at()) << "\n";
}

absl::Status KeyCreate(const Context& context) {
  const CommandLine& line = context.line;
  v1::CreateKeyRequest request;
  const std::string role_name = line.GetString("role");
  std::optional<v1::Role> role = RoleFromName(role_name);
  if (!role.has_value()) {
    return UsageError(absl::StrCat("--role=", role_name, ": expected one of ",
                                   absl::StrJoin(RoleNames(), ", ")));
  }
  request.set_role(*role);
  if (line.Has("projects")) {
    const std::vector<std::string> projects = line.GetList("projects");
    if (projects.empty() ||
        std::find(projects.begin(), projects.end(), "") != projects.end()) {
      return UsageError(
          "--projects: expected project names separated by commas; leave the "
          "flag out for a key valid for every project");
    }
    for (const std::string& project : projects) request.add_projects(project);
  }
  request.set_name(line.GetString("name"));
  if (request.name().size() > kMaxKeyNameBytes) {
    return UsageError(
        absl::StrCat("--name: at most ", kMaxKeyNameBytes, " bytes"));
  }
  VERITY_ASSIGN_OR_RETURN(v1::CreateKeyResponse created,
                          context.client.CreateKey(request));
  if (context.json) {
    PrintJson(context, CreatedKeyJson(created));
    return absl::OkStatus();
  }
  context.out << "secret_key: " << created.secret_key() << "\n";
  PrintKey(context, created.key());
  context.err << kProgram
              << ": note: store secret_key now; the server never shows it "
                 "again\n";
  return absl::OkStatus();
}

absl::Status KeyList(const Context& context) {
  VERITY_ASSIGN_OR_RETURN(std::vector<v1::ApiKey> keys,
                          context.client.ListKeys(context.line.GetBool("all")));
  if (context.json) {
    JsonArrayWriter array(context.out);
    for (const v1::ApiKey& key : keys) array.Add(ApiKeyJson(key));
    array.Finish();
    return absl::OkStatus();
  }
  if (keys.empty()) {
    context.out << "no keys\n";
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {
      {"KEY_ID", "NAME", "ROLE", "PROJECTS", "CREATED_AT", "REVOKED_AT"}};
  for (const v1::ApiKey& key : keys) {
    rows.push_back({key.key_id(), key.name().empty() ? "-" : key.name(),
                    RoleName(key.role()), FormatKeyProjects(key),
                    FormatTime(key.created_at()),
                    FormatTime(key.revoked_at())});
  }
  PrintTable(rows, context.out);
  return absl::OkStatus();
}

absl::Status KeyRevoke(const Context& context) {
  const std::string& key_id = context.line.args()[0];
  if (absl::StartsWith(key_id, "vk_")) {
    // The whole key was pasted: refuse it before it travels further.
    return UsageError(
        "KEY_ID is the key's id (16 hex digits, see `key list`), not the key "
        "itself");
  }
  VERITY_ASSIGN_OR_RETURN(v1::ApiKey key, context.client.RevokeKey(key_id));
  if (context.json) {
    PrintJson(context, ApiKeyJson(key));
    return absl::OkStatus();
  }
  PrintKey(context, key);
  return absl::OkStatus();
}

using Handler = absl::Status (*)(const Context&);

Handler HandlerFor(absl::string_view command) {
  static const auto* const handlers =
      new absl::flat_hash_map<absl::string_view, Handler>{
          {"project create", &ProjectCreate},
          {"project list", &ProjectList},
          {"project show", &ProjectShow},
          {"project settings", &ProjectSettings},
          {"item add", &ItemAdd},
          {"annotator add", &AnnotatorAdd},
          {"annotator list", &AnnotatorList},
          {"annotator show", &AnnotatorShow},
          {"annotator", &Annotator},
          {"submit", &Submit},
          {"posteriors", &Posteriors},
          {"export", &Export},
          {"accuracy", &Accuracy},
          {"suggest items", &SuggestItems},
          {"suggest annotators", &SuggestAnnotators},
          {"model status", &ModelStatus},
          {"model versions", &ModelVersions},
          {"model train", &ModelTrain},
          {"status", &ModelStatus},
          {"versions", &ModelVersions},
          {"key create", &KeyCreate},
          {"key list", &KeyList},
          {"key revoke", &KeyRevoke},
      };
  auto it = handlers->find(command);
  return it == handlers->end() ? nullptr : it->second;
}

// "verity submit --help" for the command the words of `args` name, as far as
// they name one; "verity --help" otherwise.
std::string HelpHint(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  for (const std::string& arg : args) {
    if (!arg.empty() && arg[0] != '-') words.push_back(arg);
  }
  std::string best;
  for (const CommandSpec& command : CliCommands()) {
    std::vector<std::string> name = absl::StrSplit(command.name, ' ');
    if (name.size() <= words.size() &&
        std::equal(name.begin(), name.end(), words.begin()) &&
        command.name.size() > best.size()) {
      best = command.name;
    }
    if (best.empty() && !words.empty() && name.size() > 1 &&
        name[0] == words[0]) {
      best = name[0];
    }
  }
  return best.empty() ? absl::StrCat(kProgram, " --help")
                      : absl::StrCat(kProgram, " ", best, " --help");
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err, const CliEnvironment& environment) {
  absl::StatusOr<CommandLine> line =
      ParseCommandLine(args, CliGlobalFlags(), CliCommands());
  if (!line.ok()) {
    err << kProgram << ": " << line.status().message() << "\nRun '"
        << HelpHint(args) << "' for usage.\n";
    return kExitUsage;
  }
  if (line->help()) {
    if (line->command() != nullptr) {
      out << FormatCommandUsage(kProgram, *line->command(), CliGlobalFlags());
    } else if (!line->group().empty()) {
      out << FormatGroupUsage(kProgram, line->group(), CliGlobalFlags(),
                              CliCommands());
    } else {
      out << FormatProgramUsage(kProgram, CliDescription(), CliGlobalFlags(),
                                CliCommands(), CliEpilogue());
    }
    return kExitOk;
  }
  if (line->command() == nullptr) {
    err << FormatProgramUsage(kProgram, CliDescription(), CliGlobalFlags(),
                              CliCommands(), CliEpilogue());
    return kExitUsage;
  }

  const std::string server = line->GetString("server");
  const std::string output = line->GetString("output");
  absl::StatusOr<absl::Duration> timeout = line->GetDuration("timeout");
  absl::Status status;
  if (server.empty()) {
    status = UsageError("--server must not be empty");
  } else if (!timeout.ok()) {
    status = UsageError(timeout.status().message());
  } else if (output != "text" && output != "json") {
    status = UsageError(
        absl::StrCat("--output=", output, ": expected text or json"));
  } else {
    ClientOptions options;
    options.deadline = *timeout;
    // An explicit --api_key, even an empty one, wins over the environment.
    options.api_key = std::string(absl::StripAsciiWhitespace(
        line->Has("api_key") ? line->GetString("api_key")
                             : environment.api_key));
    const ChannelSecurity security{line->GetString("tls_ca"), line->GetString("tls_cert"),
                                   line->GetString("tls_key")};
    const absl::Status transport = CheckKeyTransport(server, options.api_key, security,
                                                     line->GetBool("allow_plaintext_key"));
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        transport.ok() ? CreateChannel(server, security) : transport;
    if (!channel.ok()) {
      status = absl::IsInvalidArgument(channel.status()) ? UsageError(channel.status().message())
                                                          : channel.status();
    } else {
      VerityClient client(*channel, options);
      Context context{*line, client, out, err, environment, output == "json"};
      Handler handler = HandlerFor(line->command()->name);
      status = handler != nullptr
                   ? handler(context)
                   : absl::InternalError(absl::StrCat(
                         "no handler for \"", line->command()->name, "\""));
    }
  }
  out.flush();
  if (status.ok()) return kExitOk;
  if (IsUsageError(status)) {
    err << kProgram << ": " << status.message() << "\nRun '" << kProgram << " "
        << line->command()->name << " --help' for usage.\n";
    return kExitUsage;
  }
  err << kProgram << ": " << absl::StatusCodeToString(status.code()) << ": "
      << OnOneLine(status.message());
  if (status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    err << " (server " << server << ")";
  }
  err << "\n";
  return kExitFailure;
}

}  // namespace verity::client
