"""Aggregating the bluebirds crowd labels with Verity, from pandas.

A notebook-style walk-through: each `# %%` cell can be run on its own in Jupyter or VS Code,
or the whole file with Debian's Python (the one with python3-grpcio and python3-pandas):

    bazel build //client/python:verity_client         # generates the gRPC stubs
    make run                                          # in another shell: the server
    PYTHONPATH=client/python:bazel-bin/client/python \\
        /usr/bin/python3 client/python/examples/aggregate_bluebirds.py

Environment: VERITY_TARGET (default localhost:50051), VERITY_PROJECT (default
bluebirds-py), VERITY_DATASETS (default: the shared/datasets directory found above this file).
"""

# %% Setup: where the server and the data are.
import os
import pathlib
import time

import pandas as pd

import verity_client

TARGET = os.environ.get("VERITY_TARGET", "localhost:50051")
PROJECT = os.environ.get("VERITY_PROJECT", "bluebirds-py")


def find_datasets():
    if os.environ.get("VERITY_DATASETS"):
        return pathlib.Path(os.environ["VERITY_DATASETS"])
    for parent in pathlib.Path(__file__).resolve().parents:
        if (parent / "shared" / "datasets" / "README.md").is_file():
            return parent / "shared" / "datasets"
    raise SystemExit("no shared/datasets found; set VERITY_DATASETS")


DATA = find_datasets() / "bluebirds"

# %% Load the crowd labels: one row per (item, annotator) with the class *name*.
# dtype=str and keep_default_na=False keep ids as strings (also "NA" or "null") and the class
# names "false"/"true" from becoming booleans.
labels = pd.read_csv(DATA / "labels.csv", dtype=str, keep_default_na=False)
gold = pd.read_csv(DATA / "gold.csv", dtype=str, keep_default_na=False)
classes = (DATA / "classes.txt").read_text().split()
print(labels.head())
print("%d labels, %d items, %d annotators, classes %s" % (
    len(labels), labels["item"].nunique(), labels["annotator"].nunique(), classes))

# %% Connect. Every call has a deadline (timeout seconds); the channel closes with the block.
client = verity_client.Client(TARGET, timeout=30)
client.wait_until_ready()

# %% Create the project: the classes are fixed from now on. exist_ok=True makes re-running
# this script harmless: resubmitted labels come back as duplicates.
project = client.create_project(PROJECT, classes, method="ds", exist_ok=True)
print("project", project.name, project.classes)

# %% Stream the labels. submit() sends batches over one bidirectional stream and returns once
# every batch is acknowledged, i.e. committed to PostgreSQL.
result = client.submit(PROJECT, labels, batch_size=1000,
                       progress=lambda acked, total: print("  acked %d/%d" % (acked, total)))
print(result)

# %% The server refits Dawid-Skene in the background shortly after labels arrive; until then
# the posteriors are a majority vote. Wait a little for the first fitted version.
deadline = time.monotonic() + 20
while client.model_status(PROJECT).current_version is None and time.monotonic() < deadline:
    time.sleep(0.5)
status = client.model_status(PROJECT)
print("model:", status.method, "version",
      status.current_version.version if status.current_version else None,
      "labels", status.num_labels)

# %% Posteriors: one row per item, the most probable class, its probability, and one column
# of probabilities per class.
posteriors = client.posteriors(PROJECT)
print(posteriors.head())

# %% Accuracy against the gold labels, next to a plain majority vote computed with pandas
# (ties to the lowest class index, as in the datasets README).
truth = gold.set_index("item")["label"]
predicted = posteriors.set_index("item")["label"]
verity_accuracy = (predicted == truth.reindex(predicted.index)).mean()
counts = pd.crosstab(labels["item"], labels["label"]).reindex(columns=classes, fill_value=0)
majority = counts.idxmax(axis=1)  # idxmax takes the first maximum: the lowest class index.
majority_accuracy = (majority == truth.reindex(majority.index)).mean()
print("accuracy: verity %.4f, majority vote %.4f (%d gold items)" % (
    verity_accuracy, majority_accuracy, len(truth)))

# %% Annotator profiles: estimated accuracy and confusion matrix per annotator.
annotators = client.annotators(PROJECT).sort_values("accuracy")
print("least accurate annotators:")
print(annotators[["annotator", "accuracy", "num_labels"]].head(3).to_string(index=False))
worst = annotators.iloc[0]
print("confusion of annotator %s (rows: true class, columns: answer):" % worst["annotator"])
print(pd.DataFrame(worst["confusion"], index=classes, columns=classes).round(3))

# %% Assignment: what should a newcomer label next? Each suggestion leases the item to them.
print(client.suggest_items(PROJECT, "newcomer", k=5))

# %% Done.
client.close()
