"""Conversions between pandas DataFrames and the column lists the RPCs send.

Pure functions (no gRPC), so they are tested without a server. Every check here names the
offending column and row, and fails with ValueError before anything is sent.
"""

import numbers

import numpy as np
import pandas as pd

# Accepted column names, first the Verity name then the alias that pandas-based aggregation
# libraries (crowd-kit) use.
ITEM_COLUMNS = ("item", "task")
ANNOTATOR_COLUMNS = ("annotator", "worker")

# Largest label index an Annotation (int32) can carry.
_INT32_MAX = 2**31 - 1


def column(df, names):
    """The one column of df named by one of `names`."""
    present = [name for name in names if name in df.columns]
    if not present:
        raise ValueError("the DataFrame needs a column named %s (it has %s)" %
                         (" or ".join(repr(n) for n in names), list(df.columns)))
    if len(present) > 1:
        raise ValueError("the DataFrame has both %s columns; keep one" %
                         " and ".join(repr(n) for n in present))
    return df[present[0]]


def ids(series):
    """Item or annotator ids as a list of str. ValueError on a missing value."""
    missing = series.isna().to_numpy()
    if missing.any():
        raise ValueError("column %r has a missing id at row %d" %
                         (series.name, int(np.flatnonzero(missing)[0])))
    return series.astype(str).tolist()


def label_indices(series, classes, rows=None):
    """Class indices of a label column: class names (str) or indices (int), mixed or not.

    rows: the row number of each value in the caller's frame, for the messages (default: the
    position in `series`), when `series` is a selection of a column.

    An integer is passed through as an index without a range check, negative ones included:
    the server rejects an out-of-range index per annotation and reports it in the ack, like any
    invalid label. Only an integer that the API's 32-bit label cannot carry is refused here. A
    string must be one of `classes` exactly; digit strings are names, not indices. Booleans,
    missing values and fractional numbers are refused (read CSVs with dtype=str to keep class
    names such as "true" from becoming booleans).
    """
    if pd.api.types.is_bool_dtype(series.dtype):
        raise ValueError(
            "column %r holds booleans; labels are class names or class indices "
            "(read the CSV with dtype=str to keep names such as 'true')" % series.name)
    row_of = (lambda n: int(rows[n])) if rows is not None else (lambda n: n)
    if pd.api.types.is_integer_dtype(series.dtype) and not isinstance(
            series.dtype, pd.CategoricalDtype):
        missing = np.flatnonzero(series.isna().to_numpy())
        if missing.size:  # A nullable integer column (Int64) with <NA>.
            raise ValueError("column %r, row %d: missing label" %
                             (series.name, row_of(int(missing[0]))))
        values = series.to_numpy(dtype=np.int64)
        bad = np.flatnonzero((values < -_INT32_MAX - 1) | (values > _INT32_MAX))
        _check_index_range(series.name, values, row_of(int(bad[0])) if bad.size else None)
        return values.astype(np.int32)
    index_of = {name: i for i, name in enumerate(classes)}
    out = np.empty(len(series), dtype=np.int32)
    for n, value in enumerate(series.astype(object).tolist()):
        out[n] = _one_label(series.name, row_of(n), value, index_of, classes)
    return out


def _one_label(column, row, value, index_of, classes):
    if isinstance(value, str):
        index = index_of.get(value)
        if index is None:
            raise ValueError("column %r, row %d: %r is not a class of the project (%s)" %
                             (column, row, value, ", ".join(classes)))
        return index
    if isinstance(value, (bool, np.bool_)):
        raise ValueError("column %r, row %d: boolean label %r; use a class name or index "
                         "(read the CSV with dtype=str)" % (column, row, value))
    if isinstance(value, numbers.Integral):
        _check_index_range(column, np.array([int(value)]), row)
        return int(value)
    if isinstance(value, numbers.Real) and np.isfinite(value) and float(value).is_integer():
        _check_index_range(column, np.array([int(value)]), row)
        return int(value)
    raise ValueError("column %r, row %d: %r is neither a class name nor a class index" %
                     (column, row, value))


def _check_index_range(column, values, row=None):
    # Only what a 32-bit label cannot carry: the server checks the class range itself.
    bad = np.flatnonzero((values < -_INT32_MAX - 1) | (values > _INT32_MAX))
    if bad.size:
        at = row if row is not None else int(bad[0])
        raise ValueError("column %r, row %d: class index %d does not fit the API's 32-bit label" %
                         (column, at, int(values[bad[0]])))


def needs_class_names(series):
    """True if the label column holds anything but integers (so the classes are needed)."""
    return not (pd.api.types.is_integer_dtype(series.dtype) and
                not isinstance(series.dtype, pd.CategoricalDtype))


def annotations(df):
    """(items, annotators, label column) of an annotation DataFrame.

    df has columns item (or task), annotator (or worker) and label; other columns are ignored.
    """
    if not isinstance(df, pd.DataFrame):
        df = pd.DataFrame(df)
    items = ids(column(df, ITEM_COLUMNS))
    annotators = ids(column(df, ANNOTATOR_COLUMNS))
    return items, annotators, column(df, ("label",))


# The posterior frame's own columns (posteriors(details=True) adds the last five).
POSTERIOR_COLUMNS = ("item", "label", "confidence", "num_labels", "model_version",
                     "includes_newer_labels", "is_gold", "difficulty")


def class_columns(classes):
    """The names of the per-class probability columns: the class names, or, when one of them
    is also the name of one of the frame's own columns (POSTERIOR_COLUMNS), "p_" + every class
    name (as the CLI names them), so that no column overwrites another."""
    if any(name in POSTERIOR_COLUMNS for name in classes):
        return ["p_" + name for name in classes]
    return list(classes)


def posterior_frame(item_ids, probabilities, map_labels, confidences, classes):
    """DataFrame with columns item, label (class name), confidence, then one per class, named
    by class_columns(classes)."""
    probabilities = np.asarray(probabilities, dtype=np.float64).reshape(
        len(item_ids), len(classes))
    class_names = np.asarray(classes, dtype=object)
    columns = {
        "item": pd.Series(item_ids, dtype=object),
        "label": pd.Series(class_names[np.asarray(map_labels, dtype=np.int64)]
                           if len(item_ids) else [], dtype=object),
        "confidence": pd.Series(np.asarray(confidences, dtype=np.float64)),
    }
    # Every column at once: inserted one at a time, a frame of many classes (up to 256) is
    # fragmented and pandas warns (PerformanceWarning) for each past the hundredth.
    for k, name in enumerate(class_columns(classes)):
        columns[name] = pd.Series(probabilities[:, k])
    return pd.DataFrame(columns)
