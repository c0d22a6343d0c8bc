#include "client/cli_commands.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/message_format.h"

namespace verity::client {
namespace {

constexpr char kJsonErrors[] =
    "Errors go to stderr as one line in every output mode; stdout is then "
    "empty.";

FlagSpec ProjectFlag(std::string help) {
  return {"project", "NAME", std::move(help), "", /*required=*/true};
}

std::vector<FlagSpec> WithSettingsFlags(std::vector<FlagSpec> flags) {
  const std::vector<FlagSpec>& settings = ProjectSettingsFlags();
  flags.insert(flags.end(), settings.begin(), settings.end());
  return flags;
}

std::vector<CommandSpec> MakeCommands() {
  std::vector<CommandSpec> commands;
  auto add = [&commands](std::string name, std::string summary) {
    CommandSpec& command = commands.emplace_back();
    command.name = std::move(name);
    command.summary = std::move(summary);
    return &command;
  };

  // Projects.
  CommandSpec* c =
      add("project create", "Create a project with a fixed list of classes.");
  c->args_usage = "NAME";
  c->min_args = c->max_args = 1;
  c->usage =
      "project create NAME (--classes=A,B,... | --classes_file=FILE) [flags]";
  c->details = absl::StrCat(
      "NAME is 1-128 characters of [A-Za-z0-9._-]. The classes (2 to 256 "
      "unique names) are fixed at creation; a label is an index into their "
      "list. The settings flags are those of `project settings`; unset ones "
      "take the server defaults. Prints the new project as `project show` "
      "does.\n\n",
      kJsonErrors);
  c->flags = WithSettingsFlags({
      {"classes", "A,B,...", "Class names, comma-separated."},
      {"classes_file", "FILE",
       "Class names, one per line (a dataset's classes.txt)."},
      {"item_feature_dim", "N",
       "Length of every item feature vector; 0 = no features.", "0"},
      {"annotator_feature_dim", "N",
       "Length of every annotator feature vector; 0 = none.", "0"},
  });

  c = add("project list", "List the projects with their sizes.");
  c->details =
      "A table of every project: name, number of classes, items, annotators, "
      "live labels and truth method. With --output=json, an array of project "
      "objects as `project show --output=json` prints them.";

  c = add("project show",
          "Show a project: classes, dimensions, settings, sizes.");
  c->args_usage = "NAME";
  c->min_args = c->max_args = 1;
  c->details =
      "Prints name, classes, feature dimensions, method, the settings that "
      "differ from the server defaults, creation time, the numbers of "
      "items, annotators and live labels, and the revisions kept in history. "
      "With --output=json: {\"name\", "
      "\"classes\", \"item_feature_dim\", \"annotator_feature_dim\", "
      "\"method\", \"settings\": {\"model\": {...}, \"assignment\": {...}, "
      "\"limits\": {...}} with every setting (0 or \"\" = server default), "
      "\"created_at\", "
      "\"num_items\", \"num_annotators\", \"num_labels\", \"num_revisions\"}.";

  c = add("project settings",
          "Change the model, assignment and limit settings.");
  c->args_usage = "NAME";
  c->min_args = c->max_args = 1;
  c->usage = "project settings NAME --SETTING=VALUE ...";
  c->details =
      "Reads the project's settings, changes the ones given as flags and "
      "writes them back (the API replaces the settings whole; a concurrent "
      "change by someone else between the read and the write is lost). 0 "
      "resets a number to the server default, --method=default, "
      "--calibration=default and --policy=default reset those. A new method "
      "takes effect at the next fit (`model train` fits at once). Prints the "
      "updated project as "
      "`project show` does (JSON with --output=json).";
  c->flags = ProjectSettingsFlags();

  // Items and annotators.
  c = add("item add", "Create or update items: features, gold, priority.");
  c->usage = "item add --project=NAME (--csv=FILE | --gold_csv=FILE | both)";
  c->details =
      "The items CSV has a header naming its columns: item (or id); "
      "optionally gold (or label), a class name or class index, empty for "
      "none; optionally priority, a number (items of higher priority are "
      "suggested first; empty leaves it unchanged); optionally "
      "f0,f1,...,f<D-1> with D the project's item_feature_dim. --gold_csv "
      "reads a dataset's gold.csv (item,label); with --csv too, its gold "
      "labels are merged into the items of --csv. Items are sent in calls of "
      "at most 10,000 items and 4 MiB (fewer items per call when they carry "
      "many features); existing items are updated. Prints added=N updated=N "
      "({\"added\", \"updated\"} with --output=json).";
  c->flags = {
      ProjectFlag("Project of the items."),
      {"csv", "FILE", "Items CSV (item[,gold][,priority][,f0,f1,...])."},
      {"gold_csv", "FILE", "Gold labels CSV (item,label)."},
  };

  c = add("annotator add", "Create or update annotators and their features.");
  c->details =
      "The CSV has a header naming its columns: annotator (or id) and "
      "optionally f0,f1,...,f<D-1> with D the project's "
      "annotator_feature_dim. Annotators also appear when they first label "
      "or are first suggested items; adding them ahead gives them features. "
      "Sent in calls of at most 10,000 annotators and 4 MiB (fewer per call "
      "when they carry many features); existing annotators are updated. Prints "
      "added=N updated=N ({\"added\", \"updated\"} with --output=json).";
  c->flags = {
      ProjectFlag("Project of the annotators."),
      {"csv", "FILE", "Annotators CSV (annotator[,f0,f1,...]).", "",
       /*required=*/true},
  };

  c = add("annotator list",
          "List annotator profiles: labels and estimated accuracy.");
  c->details =
      "A table of every annotator with a profile (up to 10,000): live "
      "labels and accuracy, the probability of a correct label under the "
      "current model and class prior. --confusion prints each profile with "
      "its confusion matrix instead. With --output=json, an array of "
      "{\"annotator\", \"num_labels\", \"accuracy\", \"confusion\": {true "
      "class: {answered class: probability}}}, plus \"embedding\": [numbers] "
      "for methods that learn one (lia, conal), and \"predicted_from_features\": "
      "true when lia predicted the confusion from the features of an annotator "
      "its fit did not see.";
  c->flags = {
      ProjectFlag("Project of the annotators."),
      {"confusion", "", "Print the confusion matrix of every annotator."},
  };

  c = add("annotator show",
          "Show annotator profiles with their confusion matrices.");
  c->args_usage = "ID ...";
  c->min_args = 1;
  c->max_args = -1;
  c->details =
      "For each ID: live labels, accuracy, the learned embedding for methods "
      "that learn one (lia, conal), and the confusion matrix estimated "
      "by the current model (rows: true class, columns: answered class), "
      "or predicted by lia from the annotator's features for an annotator "
      "its fit did not see (the accuracy line then says so). "
      "NOT_FOUND names an unknown annotator. With --output=json, an array as "
      "`annotator list --output=json` prints it.";
  c->flags = {ProjectFlag("Project of the annotators.")};

  c = add("annotator", "`annotator list`, or `annotator show` given IDs.");
  c->args_usage = "[ID ...]";
  c->max_args = -1;
  c->details =
      "The short form of the annotator commands: without IDs it is "
      "`annotator list`, with IDs `annotator show ID ...`. An annotator "
      "whose id is add, list or show needs the long form (`annotator show "
      "list`). See also `annotator add`.";
  c->flags = {
      ProjectFlag("Project of the annotators."),
      {"confusion", "", "Print the confusion matrix of every annotator."},
  };

  // Labels and truth.
  c = add("submit", "Stream the labels of a CSV file to a project.");
  c->details =
      "The CSV has the header item,annotator,label (the format of a "
      "dataset's labels.csv); label is a class name of the project, or a "
      "class index if it is not a class name. Labels are streamed in batches "
      "over one stream, with retries of batches the server asks to resend; "
      "every batch is acknowledged only once it is durable. A progress meter "
      "(count, rate, ETA) is drawn on stderr when it is a terminal. Prints "
      "accepted=N duplicate=N revised=N stale=N rejected=N and the first "
      "rejection reasons (stale: older by client_time than the live label, "
      "kept in history only); exits 0 even if some labels were rejected. With "
      "--output=json: {\"accepted\", \"duplicate\", \"revised\", \"stale\", "
      "\"rejected\", \"rejections\": [{\"line\", \"item\", \"annotator\", "
      "\"reason\"}] (the first 5), \"retries\"}.";
  c->flags = {
      ProjectFlag("Project to label."),
      {"csv", "FILE", "Labels CSV (item,annotator,label).", "",
       /*required=*/true},
      {"batch_size", "N", "Labels per batch, 1 to 10000.", "1000"},
  };

  c = add("posteriors", "Print the current posteriors (CSV or JSON).");
  c->details =
      "CSV columns: item, label, confidence, p_<class> for each class in "
      "class order, num_labels; label is the most probable class name, "
      "confidence its probability, numbers to 6 significant digits; item and "
      "label are spreadsheet-safe as in `export` (a cell starting with = + - "
      "@ ' gets a leading ', a signed number such as -1 does not). Without "
      "--items, every item of the project in creation order, read page by "
      "page. With --output=json, a JSON array of {\"item\", \"label\", "
      "\"label_index\", \"confidence\", \"probabilities\": {class: p}, "
      "\"num_labels\", \"model_version\", \"includes_newer_labels\", "
      "\"is_gold\"} (plus \"difficulty\" for methods that learn one: lia), one "
      "per line. --out writes to a temporary file renamed "
      "over FILE on success, so a failed call leaves FILE as it was, and "
      "prints \"wrote N posteriors to FILE\" ({\"out\", \"posteriors\"} with "
      "--output=json); a "
      "progress meter is drawn on stderr when it is a terminal and the "
      "posteriors do not go to a terminal. `export` writes every field at "
      "full precision.";
  c->flags = {
      ProjectFlag("Project to read."),
      {"out", "FILE", "Write to FILE instead of stdout."},
      {"items", "ID,...", "Only these items (in this order)."},
      {"page_size", "N", "Posteriors per ListPosteriors call.", "1000"},
  };

  c = add("export", "Export every posterior to CSV or JSON Lines.");
  c->details =
      "Pages through ListPosteriors and writes every item of the project in "
      "creation order with all of its posterior, numbers in their shortest "
      "exact form. csv columns: item, label, label_index, confidence, "
      "p_<class> for each class, num_labels, model_version, "
      "includes_newer_labels, is_gold; an item or label starting with = + - "
      "@, a tab or a carriage return (a spreadsheet formula; a signed number "
      "such as -1 is not one) or with ' is written after a ' so that "
      "spreadsheets show it as text (remove one leading ' to read it back). "
      "jsonl: one JSON object per line with "
      "the fields of `posteriors --output=json`. With --out the file is "
      "written under a temporary name and renamed on success, and \"wrote N "
      "posteriors to FILE\" is printed ({\"out\", \"posteriors\"} with "
      "--output=json); without it the export goes to stdout. A progress "
      "meter (rate, ETA) is drawn on stderr when it is a terminal and the "
      "export does not go to a terminal.";
  c->flags = {
      ProjectFlag("Project to export."),
      {"format", "csv|jsonl", "Output format.", "csv"},
      {"out", "FILE", "Write to FILE instead of stdout."},
      {"page_size", "N", "Posteriors per ListPosteriors call, 1 to 10000.",
       "1000"},
  };

  c = add("accuracy", "Score the posteriors against gold labels.");
  c->details =
      "Reads gold labels (item,label; class names or indices), compares them "
      "with the most probable class of each item's posterior and prints "
      "\"accuracy=A (N gold items)\". Gold items without labels, items "
      "clamped to gold by `item add` and items unknown to the project are "
      "skipped and counted on a second line. With --output=json: "
      "{\"accuracy\", \"gold_items\", \"skipped\": {\"without_labels\", "
      "\"clamped_to_gold\", \"not_in_project\"}}.";
  c->flags = {
      ProjectFlag("Project to score."),
      {"gold_csv", "FILE", "Gold labels CSV (item,label).", "",
       /*required=*/true},
  };

  // Assignment.
  c = add("suggest items", "The items an annotator should label next.");
  c->details =
      "Asks the server for the K items ANNOTATOR should label next, best "
      "first, by the project's assignment policy: never an item they "
      "labelled, never a resolved item. Each suggestion LEASES its item to "
      "the annotator (reserving a label slot until the lease expires or "
      "their label arrives), so run it when the annotator will label. The "
      "annotator is created if new. Fewer than K (or none) when fewer items "
      "are open. Prints a table of item, score (the server's score: the "
      "expected reduction of the item's posterior entropy from their label; "
      "the order also weighs the labels and leases the item has, so scores "
      "need not fall down the list), p_correct (predicted probability of a "
      "correct label) and "
      "the lease expiry. With --output=json, an array of {\"item\", "
      "\"score\", \"p_correct\", \"lease_expires_at\"}.";
  c->flags = {
      ProjectFlag("Project of the items."),
      {"annotator", "ID", "The annotator who will label.", "",
       /*required=*/true},
      {"k", "N", "Items to suggest, 1 to 1000.", "10"},
      {"candidates", "ID,...",
       "Choose only among these items (unknown ids are ignored); default "
       "every open item."},
  };

  c = add("suggest annotators", "The annotators who should label an item.");
  c->details =
      "The K annotators (from --candidates, or the project's annotators) "
      "who should label ITEM next, best first. Does not lease. Prints a "
      "table of annotator, score and p_correct (predicted probability of a "
      "correct label). NOT_FOUND for an unknown item. With --output=json, an "
      "array of {\"annotator\", \"score\", \"p_correct\"}.";
  c->flags = {
      ProjectFlag("Project of the item."),
      {"item", "ID", "The item to label.", "", /*required=*/true},
      {"k", "N", "Annotators to suggest, 1 to 1000.", "10"},
      {"candidates", "ID,...",
       "Choose only among these annotators; default the project's "
       "annotators."},
  };

  // Models.
  const std::string status_details =
      "Prints method (the one the next fit uses), num_labels, "
      "labels_since_version (labels committed after the current model "
      "version's fit), training (a fit is running) and the current version's "
      "fields; then, when the server reports them, the calibration of the served "
      "posteriors (kind, temperature, source; with source gold the gold items "
      "and their ECE before and after the map) and, when the served version "
      "was fitted by method auto, chosen_method and choice_reason. With "
      "--output=json: {\"project\", "
      "\"method\", \"num_labels\", \"labels_since_version\", \"training\", "
      "\"current_version\": {...} or null, \"calibration\" and \"chosen_method\", "
      "\"choice_reason\" when present}, the version as `model versions "
      "--output=json` prints it.";
  c = add("model status", "Show the model status of a project.");
  c->details = status_details;
  c->flags = {ProjectFlag("Project to inspect.")};

  const std::string versions_details =
      "A table of the project's model versions, newest first: version, "
      "method, live labels and watermark (sequence number of the newest "
      "label) the fit saw, EM iterations, log-likelihood, fit duration and "
      "creation time. With --output=json, an array of {\"version\", "
      "\"method\", \"watermark\", \"num_labels\", \"log_likelihood\", "
      "\"iterations\", \"duration_ms\", \"created_at\"}.";
  c = add("model versions", "List a project's model versions, newest first.");
  c->details = versions_details;
  std::vector<FlagSpec> versions_flags = {
      ProjectFlag("Project to inspect."),
      {"limit", "N", "Versions to list, 1 to 1000.", "20"},
  };
  c->flags = versions_flags;

  c = add("model train", "Fit a project's model now and print the version.");
  c->details =
      "Fits the project's configured method at once (warm-started like a "
      "background refit; after a fit in progress finishes) and prints the "
      "new model version ({\"version\", ...} with --output=json); when "
      "nothing changed since the current version's fit (no label, gold or "
      "setting), nothing is fitted and that version is printed. The call "
      "waits for the fit, which can take minutes for a neural method, so its "
      "deadline is --timeout when given and 30m otherwise. The elapsed time "
      "is shown on stderr when it is a terminal. FAILED_PRECONDITION when "
      "the project has no labels.";
  c->flags = {ProjectFlag("Project to fit.")};

  c = add("status", "Same as `model status`.");
  c->details = status_details;
  c->flags = {ProjectFlag("Project to inspect.")};

  c = add("versions", "Same as `model versions`.");
  c->details = versions_details;
  c->flags = versions_flags;

  // API keys.
  const std::string key_lines =
      "key_id (the key's public id, 16 hex digits), name, role, projects (* = "
      "every project), created_at and revoked_at (- while the key is valid)";
  c = add("key create", "Create an API key and print it (shown only once).");
  c->usage =
      "key create --role=reader|writer|admin [--projects=A,B,...] "
      "[--name=TEXT]";
  c->details = absl::StrCat(
      "Needs an admin key valid for every project (--api_key or "
      "VERITY_API_KEY). The role sets what the key may do: a reader queries "
      "(projects, posteriors, annotator profiles, model status and versions, "
      "suggest annotators); a writer also submits labels, adds items and "
      "annotators, trains models and suggests items (which leases them); an "
      "admin also creates projects, changes their settings and, when valid "
      "for every project, manages keys. --projects limits the key to those "
      "projects; without it the key is valid for every project, present and "
      "future. Prints secret_key, the key to hand to its user (the server "
      "keeps only a salted hash and never shows it again), then ",
      key_lines,
      ". With --output=json: {\"secret_key\", \"key_id\", \"name\", "
      "\"role\", \"projects\": [...] ([] = every project), \"created_at\", "
      "\"revoked_at\", \"created_by\" (key_id of the admin key that made "
      "it)}.");
  c->flags = {
      {"role", "reader|writer|admin", "What the key may do (see above).", "",
       /*required=*/true},
      {"projects", "A,B,...",
       "Projects the key may touch; default every project."},
      {"name", "TEXT",
       "Who or what uses the key, for `key list` (at most 256 bytes)."},
  };

  c = add("key list", "List the API keys (never their secrets).");
  c->details =
      "A table of the valid keys, oldest first as the server lists them: "
      "key_id, name, role, projects (* = every project), created_at and "
      "revoked_at; --all adds the revoked keys. Needs an admin key valid for "
      "every project. With --output=json, an array of key objects as `key "
      "create --output=json` prints them, without secret_key.";
  c->flags = {{"all", "", "Also list revoked keys."}};

  c = add("key revoke", "Revoke an API key.");
  c->args_usage = "KEY_ID";
  c->min_args = c->max_args = 1;
  c->details = absl::StrCat(
      "KEY_ID is the key's public id (16 hex digits, printed by `key create` "
      "and `key list`), not the key itself. The key stops working on this "
      "server at once, and on other servers of the same database within "
      "their --key_refresh_seconds. Revoking a revoked key changes nothing; "
      "NOT_FOUND for an unknown KEY_ID. Needs an admin key valid for every "
      "project. Prints ",
      key_lines,
      ". With --output=json, the key object as `key list --output=json` "
      "prints it.");
  return commands;
}

}  // namespace

const std::vector<FlagSpec>& CliGlobalFlags() {
  static const auto* const flags = new std::vector<FlagSpec>{
      {"server", "HOST:PORT[,HOST:PORT...]",
       "Verity server address, or several replicas of one database separated by commas: "
       "calls are spread over them and move to another replica when one fails (a stream "
       "resends its unacknowledged batches there). A DNS name with several addresses counts "
       "as several replicas.",
       "localhost:50051"},
      {"tls_ca", "FILE",
       "PEM CA bundle that signed the server's certificate: connect with TLS (plaintext "
       "when empty).",
       ""},
      {"tls_cert", "FILE", "PEM client certificate, for servers that require one (with --tls_ca).",
       ""},
      {"tls_key", "FILE", "PEM private key of --tls_cert.", ""},
      {"timeout", "DURATION",
       "Deadline of each call: 30s, 2m, 500ms; a plain number is seconds "
       "(`model train` waits 30m unless given).",
       "30s"},
      {"output", "text|json",
       "text: tables and key: value lines for people. json: one JSON "
       "document on stdout for scripts (see each command's help).",
       "text"},
      {"api_key", "KEY",
       "API key sent with every call (`authorization: Bearer KEY`), for a "
       "server with authentication on; default $VERITY_API_KEY, and "
       "--api_key= sends none. Prefer the variable: a flag shows in ps and "
       "shell history. A key is sent in plaintext (no --tls_ca) only to a "
       "loopback server unless --allow_plaintext_key."},
      {"allow_plaintext_key", "",
       "Send the API key without TLS to a server that is not on loopback "
       "(localhost, 127.0.0.0/8, ::1), e.g. through a tunnel you trust. "
       "Anyone on the path can read a plaintext key.",
       "false"},
      {"help", "", "Print usage and exit; also `verity help <command>`."},
  };
  return *flags;
}

const std::vector<FlagSpec>& ProjectSettingsFlags() {
  static const auto* const flags = new std::vector<FlagSpec>{
      {"method", "METHOD",
       absl::StrCat(
           "Truth-inference method: ", absl::StrJoin(MethodNames(), ", "),
           ", or default (the server's default for new projects, auto).")},
      {"confusion_smoothing", "X",
       "Dirichlet pseudo-count added to every confusion-matrix cell."},
      {"prior_smoothing", "X", "Pseudo-count added to every class prior."},
      {"max_iterations", "N", "EM iteration cap of a full fit."},
      {"tolerance", "X", "Relative log-likelihood change that stops EM."},
      {"refit_min_new_labels", "N",
       "A background refit needs at least this many new labels."},
      {"refit_new_label_fraction", "X",
       "A background refit needs this fraction of the labels to be new "
       "(or refit_min_new_labels, whichever is more)."},
      {"calibration", "MAP",
       "Map from the fitted to the served posteriors: auto (a temperature "
       "fitted on the gold items, or on the crowd labels without enough "
       "gold), none (the model's own posteriors), or default (auto)."},
      {"min_labels_per_item", "N",
       "Labels an item needs before it can be resolved."},
      {"max_labels_per_item", "N",
       "Labels after which an item is resolved; 0 = unlimited."},
      {"confidence_target", "X",
       "Posterior confidence at which an item is resolved; 0 = never."},
      {"lease_seconds", "N",
       "How long a suggestion reserves its item's label slot."},
      {"policy", "POLICY",
       absl::StrCat("How items are ranked for an annotator: ",
                    absl::StrJoin(PolicyNames(), ", "), ".")},
      {"gold_items_for_new_annotators", "N",
       "Gold items sent first to an annotator with fewer labels; 0 = off."},
      {"max_items", "N",
       "Limit: items of the project; 0 = the server's default. Raising a "
       "limit takes an admin key valid for every project."},
      {"max_annotators", "N", "Limit: annotators; 0 = the server's default."},
      {"max_labels", "N", "Limit: live labels; 0 = the server's default."},
      {"max_confusion_cells", "N",
       "Limit: annotators x classes^2 of the dense-confusion methods; 0 = "
       "the server's default."},
      {"max_feature_values", "N",
       "Limit: feature values held in memory; 0 = the server's default."},
      {"max_revisions", "N",
       "Limit: revised and stale labels kept in history; 0 = the server's "
       "default."},
  };
  return *flags;
}

const std::vector<CommandSpec>& CliCommands() {
  static const auto* const commands =
      new std::vector<CommandSpec>(MakeCommands());
  return *commands;
}

const char* CliDescription() {
  return "verity: command-line client of the Verity annotation-aggregation "
         "service.";
}

const char* CliEpilogue() {
  return "Example (a dataset folder of shared/datasets, a server on "
         "localhost:50051):\n"
         "  verity project create birds --classes_file=bluebirds/classes.txt\n"
         "  verity submit --project=birds --csv=bluebirds/labels.csv\n"
         "  verity model train --project=birds\n"
         "  verity posteriors --project=birds --out=posteriors.csv\n"
         "  verity accuracy --project=birds --gold_csv=bluebirds/gold.csv\n"
         "  verity suggest items --project=birds --annotator=39 --k=5\n"
         "  verity export --project=birds --format=jsonl --out=birds.jsonl\n"
         "  verity model versions --project=birds --output=json | jq '.[0]'\n"
         "\n"
         "API keys: a server with authentication on (by default, one not "
         "listening on\n"
         "loopback only) refuses calls without a valid key (UNAUTHENTICATED) "
         "and calls\n"
         "outside the key's role or projects (PERMISSION_DENIED). Give the key "
         "in\n"
         "VERITY_API_KEY (or --api_key). The first admin key is in the "
         "server's\n"
         "--admin_key_file (DATA_DIR/admin.key); it makes the others:\n"
         "  export VERITY_API_KEY=$(cat var/admin.key)\n"
         "  verity key create --role=writer --projects=birds --name=crowd-app\n"
         "  verity key list --all\n"
         "  verity key revoke 0123456789abcdef\n"
         "\n"
         "Exit status: 0 success; 1 the command failed (one line \"verity: "
         "CODE: message\"\non stderr); 2 a usage error.\n";
}

}  // namespace verity::client
