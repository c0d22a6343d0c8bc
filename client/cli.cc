#include "client/cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
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
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/command_line.h"
#include "client/csv_input.h"
#include "client/progress.h"
#include "client/verity_client.h"
#include "common/status_macros.h"
#include "google/protobuf/timestamp.pb.h"
#include "verity/v1/common.pb.h"

namespace verity::client {
namespace {

constexpr char kProgram[] = "verity";
constexpr char kDescription[] =
    "verity: command-line client of the Verity annotation-aggregation "
    "service.";

constexpr char kEpilogue[] =
    "Example (a dataset folder of shared/datasets, a server on "
    "localhost:50051):\n"
    "  verity project create birds --classes_file=bluebirds/classes.txt\n"
    "  verity submit --project=birds --csv=bluebirds/labels.csv\n"
    "  verity status --project=birds\n"
    "  verity posteriors --project=birds --out=posteriors.csv\n"
    "  verity accuracy --project=birds --gold_csv=bluebirds/gold.csv\n"
    "\n"
    "Exit status: 0 success; 1 the command failed (one line \"verity: CODE: "
    "message\"\non stderr); 2 a usage error.\n";

// Marks a status as a usage error (exit code 2, hint to --help).
constexpr char kUsagePayload[] = "verity.cli/usage";

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

// ---------------------------------------------------------------------------
// Command specs.

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* const flags = new std::vector<FlagSpec>{
      {"server", "HOST:PORT", "Verity server address.", "localhost:50051"},
      {"timeout", "DURATION",
       "Deadline of each call: 30s, 2m, 500ms; a plain number is seconds.",
       "30s"},
      {"help", "", "Print usage and exit; also `verity help <command>`."},
  };
  return *flags;
}

FlagSpec ProjectFlag(std::string help) {
  return {"project", "NAME", std::move(help), "", /*required=*/true};
}

std::vector<CommandSpec> MakeCommands() {
  std::vector<CommandSpec> commands;
  auto add = [&commands](std::string name, std::string summary) {
    CommandSpec& command = commands.emplace_back();
    command.name = std::move(name);
    command.summary = std::move(summary);
    return &command;
  };

  CommandSpec* c =
      add("project create", "Create a project with a fixed list of classes.");
  c->args_usage = "NAME";
  c->min_args = c->max_args = 1;
  c->usage =
      "project create NAME (--classes=A,B,... | --classes_file=FILE) [flags]";
  c->details =
      "NAME is 1-128 characters of [A-Za-z0-9._-]. The classes (2 to 256 "
      "unique names) are fixed at creation; a label is an index into their "
      "list. METHOD is the truth-inference method: ds (Dawid-Skene, the "
      "server default) or mv (majority vote); one_coin, glad, lia, "
      "crowdlayer, trace_reg, conal and cmm are reserved and refused with "
      "UNIMPLEMENTED for now. Prints the new project.";
  c->flags = {
      {"classes", "A,B,...", "Class names, comma-separated."},
      {"classes_file", "FILE",
       "Class names, one per line (a dataset's classes.txt)."},
      {"method", "METHOD", "Truth-inference method: ds or mv."},
      {"item_feature_dim", "N",
       "Length of every item feature vector; 0 = no features.", "0"},
      {"annotator_feature_dim", "N",
       "Length of every annotator feature vector; 0 = none.", "0"},
  };

  add("project list", "List the projects with their sizes.");

  c = add("project show",
          "Show a project: classes, dimensions, settings, sizes.");
  c->args_usage = "NAME";
  c->min_args = c->max_args = 1;

  c = add("item add", "Create or update items: features and gold labels.");
  c->usage = "item add --project=NAME (--csv=FILE | --gold_csv=FILE | both)";
  c->details =
      "The items CSV has a header naming its columns: item (or id); "
      "optionally gold (or label), a class name or class index, empty for "
      "none; optionally f0,f1,...,f<D-1> with D the project's "
      "item_feature_dim. --gold_csv reads a dataset's gold.csv (item,label); "
      "with --csv too, its gold labels are merged into the items of --csv. "
      "Items are sent 10,000 per call; existing items are updated. Prints "
      "added=N updated=N.";
  c->flags = {
      ProjectFlag("Project of the items."),
      {"csv", "FILE", "Items CSV (item[,gold][,f0,f1,...])."},
      {"gold_csv", "FILE", "Gold labels CSV (item,label)."},
  };

  c = add("submit", "Stream the labels of a CSV file to a project.");
  c->details =
      "The CSV has the header item,annotator,label (the format of a "
      "dataset's labels.csv); label is a class name of the project, or a "
      "class index if it is not a class name. Labels are streamed in batches "
      "over one stream, with retries of batches the server asks to resend; a "
      "progress meter is drawn on stderr when it is a terminal. Prints "
      "accepted=N duplicate=N revised=N rejected=N and the first rejection "
      "reasons; exits 0 even if some labels were rejected.";
  c->flags = {
      ProjectFlag("Project to label."),
      {"csv", "FILE", "Labels CSV (item,annotator,label).", "",
       /*required=*/true},
      {"batch_size", "N", "Labels per batch, 1 to 10000.", "1000"},
  };

  c = add("posteriors", "Write the current posteriors as CSV.");
  c->details =
      "Columns: item, label, confidence, p_<class> for each class in class "
      "order, num_labels. label is the most probable class name, confidence "
      "its probability. Without --items, every item of the project in "
      "creation order.";
  c->flags = {
      ProjectFlag("Project to read."),
      {"out", "FILE", "Write the CSV to FILE instead of stdout."},
      {"items", "ID,...", "Only these items (in this order)."},
      {"page_size", "N", "Posteriors per ListPosteriors call.", "1000"},
  };

  c = add("annotator",
          "Show annotator profiles: labels, accuracy, confusion matrix.");
  c->args_usage = "[ID ...]";
  c->max_args = -1;
  c->details =
      "With IDs, each annotator's profile with its confusion matrix (rows: "
      "true class, columns: answered class). Without, a table of every "
      "annotator (up to 10,000); add --confusion for the matrices too.";
  c->flags = {
      ProjectFlag("Project of the annotators."),
      {"confusion", "", "Print confusion matrices for every annotator."},
  };

  c = add("status", "Show the model status of a project.");
  c->details =
      "Prints method, num_labels, labels_since_version (labels committed "
      "after the current model version's fit), training and the current "
      "version's fields.";
  c->flags = {ProjectFlag("Project to inspect.")};

  c = add("versions", "List a project's model versions, newest first.");
  c->flags = {
      ProjectFlag("Project to inspect."),
      {"limit", "N", "Versions to list, 1 to 1000.", "20"},
  };

  c = add("accuracy", "Score the posteriors against gold labels.");
  c->details =
      "Reads gold labels (item,label; class names or indices), compares them "
      "with the most probable class of each item's posterior and prints "
      "\"accuracy=A (N gold items)\". Gold items without labels, items "
      "clamped to gold by `item add` and items unknown to the project are "
      "skipped and counted on a second line.";
  c->flags = {
      ProjectFlag("Project to score."),
      {"gold_csv", "FILE", "Gold labels CSV (item,label).", "",
       /*required=*/true},
  };
  return commands;
}

const std::vector<CommandSpec>& Commands() {
  static const auto* const commands =
      new std::vector<CommandSpec>(MakeCommands());
  return *commands;
}

// ---------------------------------------------------------------------------
// Helpers.

struct Context {
  const CommandLine& line;
  const VerityClient& client;
  std::ostream& out;
  std::ostream& err;
  const CliEnvironment& environment;
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

struct MethodName {
  v1::TruthMethod method;
  const char* name;
};

constexpr MethodName kMethodNames[] = {
    {v1::TRUTH_METHOD_MAJORITY_VOTE, "mv"},
    {v1::TRUTH_METHOD_DAWID_SKENE, "ds"},
    {v1::TRUTH_METHOD_ONE_COIN, "one_coin"},
    {v1::TRUTH_METHOD_GLAD, "glad"},
    {v1::TRUTH_METHOD_LIA, "lia"},
    {v1::TRUTH_METHOD_CROWDLAYER, "crowdlayer"},
    {v1::TRUTH_METHOD_TRACE_REG, "trace_reg"},
    {v1::TRUTH_METHOD_CONAL, "conal"},
    {v1::TRUTH_METHOD_CMM, "cmm"},
};

std::string FormatMethod(v1::TruthMethod method) {
  if (method == v1::TRUTH_METHOD_UNSPECIFIED) return "default (ds)";
  for (const MethodName& entry : kMethodNames) {
    if (entry.method == method) return entry.name;
  }
  return absl::StrCat("unknown (", static_cast<int>(method), ")");
}

absl::StatusOr<v1::TruthMethod> ParseMethod(absl::string_view name) {
  for (const MethodName& entry : kMethodNames) {
    if (entry.name == name) return entry.method;
  }
  std::vector<std::string> names;
  for (const MethodName& entry : kMethodNames) names.push_back(entry.name);
  return UsageError(absl::StrCat("--method=", name, ": expected one of ",
                                 absl::StrJoin(names, ", ")));
}

std::string FormatTimestamp(const google::protobuf::Timestamp& timestamp) {
  if (timestamp.seconds() == 0 && timestamp.nanos() == 0) return "-";
  const absl::Time time = absl::FromUnixSeconds(timestamp.seconds()) +
                          absl::Nanoseconds(timestamp.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
}

std::string FormatNumber(double value) {
  return absl::StrFormat("%.6g", value);
}

std::string ClassName(const v1::Project& project, int32_t index) {
  if (index >= 0 && index < project.classes_size()) {
    return project.classes(index);
  }
  return absl::StrCat(index);
}

// Prints rows as columns separated by two spaces, left-aligned.
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                std::ostream& out) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) {
        line.append(widths[c] - row[c].size() + 2, ' ');
      }
    }
    out << line << "\n";
  }
}

void PrintProject(const v1::Project& project, std::ostream& out) {
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
  out << "created_at: " << FormatTimestamp(project.created_at()) << "\n"
      << "items: " << project.num_items() << "\n"
      << "annotators: " << project.num_annotators() << "\n"
      << "labels: " << project.num_labels() << "\n";
}

// The project's label parser (fetches the project).
absl::StatusOr<std::pair<v1::Project, LabelParser>> ProjectAndLabels(
    const Context& context) {
  VERITY_ASSIGN_OR_RETURN(
      v1::Project project,
      context.client.GetProject(context.line.GetString("project")));
  LabelParser labels(std::vector<std::string>(project.classes().begin(),
                                              project.classes().end()));
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
      return absl::InternalError(
          absl::StrCat("ListPosteriors returned its request's page token \"",
                       token, "\" again"));
    }
    token = page.next_page_token();
  }
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
  absl::StatusOr<int64_t> item_dim = line.GetInt("item_feature_dim", 0, 65536);
  if (!item_dim.ok()) return UsageError(item_dim.status().message());
  absl::StatusOr<int64_t> annotator_dim =
      line.GetInt("annotator_feature_dim", 0, 65536);
  if (!annotator_dim.ok()) return UsageError(annotator_dim.status().message());
  project.set_item_feature_dim(static_cast<int32_t>(*item_dim));
  project.set_annotator_feature_dim(static_cast<int32_t>(*annotator_dim));
  if (line.Has("method")) {
    VERITY_ASSIGN_OR_RETURN(v1::TruthMethod method,
                            ParseMethod(line.GetString("method")));
    project.mutable_settings()->mutable_model()->set_method(method);
  }
  VERITY_ASSIGN_OR_RETURN(v1::Project created,
                          context.client.CreateProject(project));
  PrintProject(created, context.out);
  return absl::OkStatus();
}

absl::Status ProjectList(const Context& context) {
  VERITY_ASSIGN_OR_RETURN(std::vector<v1::Project> projects,
                          context.client.ListProjects());
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
  PrintProject(project, context.out);
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
  context.out << "added=" << totals.added << " updated=" << totals.updated
              << "\n";
  return absl::OkStatus();
}

absl::Status Submit(const Context& context) {
  const CommandLine& line = context.line;
  absl::StatusOr<int64_t> batch_size =
      line.GetInt("batch_size", 1, VerityClient::kMaxItemsPerCall);
  if (!batch_size.ok()) return UsageError(batch_size.status().message());
  VERITY_ASSIGN_OR_RETURN(auto project_and_labels, ProjectAndLabels(context));
  const auto& [project, labels] = project_and_labels;
  const std::string file = line.GetString("csv");
  VERITY_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  VERITY_ASSIGN_OR_RETURN(AnnotationRows rows,
                          ParseAnnotationsCsv(text, file, labels));
  text.clear();
  text.shrink_to_fit();

  constexpr int kRejectionsShown = 5;
  SubmitOptions options;
  options.batch_size = static_cast<int>(*batch_size);
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
  context.out << "accepted=" << totals->accepted
              << " duplicate=" << totals->duplicate
              << " revised=" << totals->revised
              << " rejected=" << totals->rejected << "\n";
  for (const SubmitRejection& rejection : totals->rejections) {
    if (rejection.index < 0 ||
        rejection.index >= static_cast<int64_t>(rows.annotations.size())) {
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
  const CommandLine& line = context.line;
  absl::StatusOr<int64_t> page_size =
      line.GetInt("page_size", 1, VerityClient::kMaxItemsPerCall);
  if (!page_size.ok()) return UsageError(page_size.status().message());
  VERITY_ASSIGN_OR_RETURN(
      v1::Project project,
      context.client.GetProject(context.line.GetString("project")));

  // --out is written to a sibling file renamed over FILE on success, so a
  // failed call leaves an existing FILE alone.
  const std::string out_path = line.GetString("out");
  const std::string partial_path = absl::StrCat(out_path, ".partial");
  std::ofstream file;
  std::ostream* out = &context.out;
  if (!out_path.empty()) {
    file.open(partial_path, std::ios::binary | std::ios::trunc);
    if (!file) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("cannot write ", partial_path));
    }
    out = &file;
  }

  // The header goes out with the first row (or at the end), so an error on
  // the first call prints nothing.
  bool header_written = false;
  std::vector<std::string> fields;
  auto write_header = [&] {
    if (header_written) return;
    header_written = true;
    fields = {"item", "label", "confidence"};
    for (const std::string& name : project.classes()) {
      fields.push_back(absl::StrCat("p_", name));
    }
    fields.push_back("num_labels");
    *out << FormatCsvRecord(fields) << "\n";
  };
  int64_t written = 0;
  auto write = [&](const v1::Posterior& posterior) {
    write_header();
    fields.clear();
    fields.push_back(posterior.item());
    fields.push_back(ClassName(project, posterior.map_label()));
    fields.push_back(FormatNumber(posterior.confidence()));
    for (double p : posterior.probabilities()) {
      fields.push_back(FormatNumber(p));
    }
    fields.push_back(absl::StrCat(posterior.num_labels()));
    *out << FormatCsvRecord(fields) << "\n";
    ++written;
  };

  absl::Status status;
  if (line.Has("items")) {
    absl::StatusOr<std::vector<v1::Posterior>> posteriors =
        context.client.GetPosteriors(project.name(), line.GetList("items"));
    status = posteriors.status();
    if (posteriors.ok()) {
      for (const v1::Posterior& posterior : *posteriors) write(posterior);
    }
  } else {
    status = ForEachPosteriorPage(
        context, project.name(), static_cast<int32_t>(*page_size),
        [&](const v1::ListPosteriorsResponse& page) {
          for (const v1::Posterior& posterior : page.posteriors()) {
            write(posterior);
          }
          return absl::OkStatus();
        });
  }
  if (status.ok()) write_header();
  out->flush();
  if (status.ok() && !*out) {
    status = absl::ErrnoToStatus(
        errno, absl::StrCat("cannot write ",
                            out_path.empty() ? "stdout" : partial_path));
  }
  if (out_path.empty()) return status;
  file.close();
  if (!status.ok()) {
    std::remove(partial_path.c_str());
    return status;
  }
  if (std::rename(partial_path.c_str(), out_path.c_str()) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot rename ", partial_path, " to ", out_path));
  }
  context.out << "wrote " << written << " posteriors to " << out_path << "\n";
  return absl::OkStatus();
}

void PrintConfusion(const v1::Project& project,
                    const v1::ConfusionMatrix& confusion, std::ostream& out) {
  const int k = confusion.num_classes();
  if (k <= 0 || confusion.probabilities_size() != k * k) {
    out << "confusion: none\n";
    return;
  }
  out << "confusion (rows: true class, columns: answered class):\n";
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {" "};
  for (int l = 0; l < k; ++l) header.push_back(ClassName(project, l));
  rows.push_back(std::move(header));
  for (int t = 0; t < k; ++t) {
    std::vector<std::string> row = {ClassName(project, t)};
    for (int l = 0; l < k; ++l) {
      row.push_back(
          absl::StrFormat("%.4f", confusion.probabilities(t * k + l)));
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

absl::Status Annotator(const Context& context) {
  const CommandLine& line = context.line;
  VERITY_ASSIGN_OR_RETURN(
      v1::Project project,
      context.client.GetProject(context.line.GetString("project")));
  VERITY_ASSIGN_OR_RETURN(
      std::vector<v1::AnnotatorProfile> profiles,
      context.client.GetAnnotatorProfiles(project.name(), line.args()));
  if (line.args().empty() && !line.GetBool("confusion")) {
    std::vector<std::vector<std::string>> rows = {
        {"ANNOTATOR", "LABELS", "ACCURACY"}};
    for (const v1::AnnotatorProfile& profile : profiles) {
      rows.push_back({profile.annotator(), absl::StrCat(profile.num_labels()),
                      absl::StrFormat("%.4f", profile.accuracy())});
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
                << "accuracy: " << absl::StrFormat("%.4f", profile.accuracy())
                << "\n";
    PrintConfusion(project, profile.confusion(), context.out);
  }
  return absl::OkStatus();
}

absl::Status ShowStatus(const Context& context) {
  const std::string project = context.line.GetString("project");
  VERITY_ASSIGN_OR_RETURN(v1::GetModelStatusResponse status,
                          context.client.GetModelStatus(project));
  std::ostream& out = context.out;
  out << "project: " << project << "\n"
      << "method: " << FormatMethod(status.method()) << "\n"
      << "num_labels: " << status.num_labels() << "\n"
      << "labels_since_version: " << status.labels_since_version() << "\n"
      << "training: " << (status.training() ? "true" : "false") << "\n";
  if (!status.has_current_version()) {
    out << "current_version: none (no fit yet)\n";
    return absl::OkStatus();
  }
  const v1::ModelVersion& version = status.current_version();
  out << "current_version:\n"
      << "  version: " << version.version() << "\n"
      << "  method: " << FormatMethod(version.method()) << "\n"
      << "  watermark: " << version.watermark() << "\n"
      << "  num_labels: " << version.num_labels() << "\n"
      << "  log_likelihood: " << FormatNumber(version.log_likelihood()) << "\n"
      << "  iterations: " << version.iterations() << "\n"
      << "  duration_ms: " << FormatNumber(version.duration_ms()) << "\n"
      << "  created_at: " << FormatTimestamp(version.created_at()) << "\n";
  return absl::OkStatus();
}

absl::Status Versions(const Context& context) {
  absl::StatusOr<int64_t> limit = context.line.GetInt("limit", 1, 1000);
  if (!limit.ok()) return UsageError(limit.status().message());
  VERITY_ASSIGN_OR_RETURN(
      std::vector<v1::ModelVersion> versions,
      context.client.ListModelVersions(context.line.GetString("project"),
                                       static_cast<int32_t>(*limit)));
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
         FormatTimestamp(version.created_at())});
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
  if (scored == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no gold item of ", file, " has labels in project \"",
                     project.name(), "\""));
  }
  context.out << "accuracy="
              << absl::StrFormat("%.4f", static_cast<double>(correct) / scored)
              << " (" << scored << " gold items)\n";
  std::vector<std::string> skipped;
  if (unlabelled > 0) {
    skipped.push_back(absl::StrCat(unlabelled, " without labels"));
  }
  if (clamped > 0) {
    skipped.push_back(absl::StrCat(clamped, " clamped to gold by item add"));
  }
  const int64_t missing = static_cast<int64_t>(gold.size()) - found;
  if (missing > 0) {
    skipped.push_back(absl::StrCat(missing, " not in the project"));
  }
  if (!skipped.empty()) {
    context.out << "skipped gold items: " << absl::StrJoin(skipped, ", ")
                << "\n";
  }
  return absl::OkStatus();
}

using Handler = absl::Status (*)(const Context&);

Handler HandlerFor(absl::string_view command) {
  static const auto* const handlers =
      new absl::flat_hash_map<absl::string_view, Handler>{
          {"project create", &ProjectCreate},
          {"project list", &ProjectList},
          {"project show", &ProjectShow},
          {"item add", &ItemAdd},
          {"submit", &Submit},
          {"posteriors", &Posteriors},
          {"annotator", &Annotator},
          {"status", &ShowStatus},
          {"versions", &Versions},
          {"accuracy", &Accuracy},
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
  for (const CommandSpec& command : Commands()) {
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
      ParseCommandLine(args, GlobalFlags(), Commands());
  if (!line.ok()) {
    err << kProgram << ": " << line.status().message() << "\nRun '"
        << HelpHint(args) << "' for usage.\n";
    return kExitUsage;
  }
  if (line->help()) {
    if (line->command() != nullptr) {
      out << FormatCommandUsage(kProgram, *line->command(), GlobalFlags());
    } else if (!line->group().empty()) {
      out << FormatGroupUsage(kProgram, line->group(), GlobalFlags(),
                              Commands());
    } else {
      out << FormatProgramUsage(kProgram, kDescription, GlobalFlags(),
                                Commands(), kEpilogue);
    }
    return kExitOk;
  }
  if (line->command() == nullptr) {
    err << FormatProgramUsage(kProgram, kDescription, GlobalFlags(), Commands(),
                              kEpilogue);
    return kExitUsage;
  }

  const std::string server = line->GetString("server");
  absl::StatusOr<absl::Duration> timeout = line->GetDuration("timeout");
  absl::Status status;
  if (server.empty()) {
    status = UsageError("--server must not be empty");
  } else if (!timeout.ok()) {
    status = UsageError(timeout.status().message());
  } else {
    ClientOptions options;
    options.deadline = *timeout;
    VerityClient client(CreateInsecureChannel(server), options);
    Context context{*line, client, out, err, environment};
    Handler handler = HandlerFor(line->command()->name);
    status = handler != nullptr
                 ? handler(context)
                 : absl::InternalError(absl::StrCat(
                       "no handler for \"", line->command()->name, "\""));
  }
  out.flush();
  if (status.ok()) return kExitOk;
  if (IsUsageError(status)) {
    err << kProgram << ": " << status.message() << "\nRun '" << kProgram << " "
        << line->command()->name << " --help' for usage.\n";
    return kExitUsage;
  }
  err << kProgram << ": " << absl::StatusCodeToString(status.code()) << ": "
      << status.message();
  if (status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    err << " (server " << server << ")";
  }
  err << "\n";
  return kExitFailure;
}

}  // namespace verity::client
