"""Tests of verity_client.frames: DataFrame columns and labels to what the RPCs send."""

import unittest
import warnings

import numpy as np
import pandas as pd

import junit
from verity_client import frames

CLASSES = ("false", "true")


class AnnotationsTest(unittest.TestCase):

    def test_reads_item_annotator_label_columns(self):
        df = pd.DataFrame({"item": ["a", "b"], "annotator": ["w1", "w2"],
                           "label": ["true", "false"], "extra": [1, 2]})
        items, annotators, labels = frames.annotations(df)
        self.assertEqual(items, ["a", "b"])
        self.assertEqual(annotators, ["w1", "w2"])
        np.testing.assert_array_equal(frames.label_indices(labels, CLASSES), [1, 0])

    def test_accepts_task_and_worker_aliases(self):
        df = pd.DataFrame({"task": [11573, 11574], "worker": [39, 40], "label": [0, 1]})
        items, annotators, labels = frames.annotations(df)
        self.assertEqual(items, ["11573", "11574"])
        self.assertEqual(annotators, ["39", "40"])
        self.assertFalse(frames.needs_class_names(labels))
        np.testing.assert_array_equal(frames.label_indices(labels, ()), [0, 1])

    def test_accepts_records(self):
        items, annotators, labels = frames.annotations(
            [{"item": "a", "annotator": "w", "label": "true"}])
        self.assertEqual((items, annotators), (["a"], ["w"]))
        np.testing.assert_array_equal(frames.label_indices(labels, CLASSES), [1])

    def test_refuses_both_item_and_task(self):
        df = pd.DataFrame({"item": ["a"], "task": ["a"], "annotator": ["w"], "label": [0]})
        with self.assertRaisesRegex(ValueError, "both 'item' and 'task'"):
            frames.annotations(df)

    def test_names_the_missing_column(self):
        df = pd.DataFrame({"item": ["a"], "label": [0]})
        with self.assertRaisesRegex(ValueError, "'annotator' or 'worker'"):
            frames.annotations(df)

    def test_refuses_missing_id_with_its_row(self):
        df = pd.DataFrame({"item": ["a", None], "annotator": ["w", "w"], "label": [0, 1]})
        with self.assertRaisesRegex(ValueError, "'item' has a missing id at row 1"):
            frames.annotations(df)


    def test_names_the_first_of_several_missing_ids(self):
        df = pd.DataFrame({"task": ["a", "b", "c", "d"], "worker": ["w", None, "w", None],
                           "label": [0, 1, 0, 1]})
        with self.assertRaisesRegex(ValueError, "'worker' has a missing id at row 1$"):
            frames.annotations(df)

class LabelIndicesTest(unittest.TestCase):

    def test_maps_mixed_names_and_indices(self):
        labels = pd.Series(["true", 0, np.int64(1), 1.0], name="label", dtype=object)
        self.assertTrue(frames.needs_class_names(labels))
        np.testing.assert_array_equal(frames.label_indices(labels, CLASSES), [1, 0, 1, 1])

    def test_digit_strings_are_names_not_indices(self):
        labels = pd.Series(["1", "0"], name="label")
        np.testing.assert_array_equal(frames.label_indices(labels, ("0", "1")), [1, 0])
        with self.assertRaisesRegex(ValueError, "row 0: '1' is not a class"):
            frames.label_indices(labels, CLASSES)

    def test_unknown_name_lists_the_classes(self):
        labels = pd.Series(["true", "maybe"], name="label")
        with self.assertRaisesRegex(ValueError, r"row 1: 'maybe' is not a class of the "
                                                r"project \(false, true\)"):
            frames.label_indices(labels, CLASSES)

    def test_integer_indices_pass_through_for_the_server_to_check(self):
        labels = pd.Series([0, 7], name="label")
        np.testing.assert_array_equal(frames.label_indices(labels, CLASSES), [0, 7])

    def test_negative_indices_pass_through_for_the_server_to_check(self):
        # README: an integer index out of range is rejected by the server alone.
        np.testing.assert_array_equal(
            frames.label_indices(pd.Series([0, -1], name="label"), CLASSES), [0, -1])
        np.testing.assert_array_equal(
            frames.label_indices(pd.Series([0, -1], name="label", dtype=object), CLASSES), [0, -1])

    def test_refuses_an_index_a_32_bit_label_cannot_carry(self):
        with self.assertRaisesRegex(ValueError, "row 1: class index 2147483648 does not fit"):
            frames.label_indices(pd.Series([0, 2**31], name="label"), CLASSES)
        with self.assertRaisesRegex(ValueError, "row 1: class index -2147483649 does not fit"):
            frames.label_indices(pd.Series([0, -2**31 - 1], name="label", dtype=object), CLASSES)

    def test_the_ends_of_the_32_bit_range_pass(self):
        for dtype in (np.int64, object):
            indices = frames.label_indices(
                pd.Series([-2**31, 2**31 - 1], name="label", dtype=dtype), CLASSES)
            self.assertEqual(indices.tolist(), [-2**31, 2**31 - 1])

    def test_refuses_booleans(self):
        with self.assertRaisesRegex(ValueError, "dtype=str"):
            frames.label_indices(pd.Series([True, False], name="label"), CLASSES)
        # A Python bool among names and indices is refused too, not read as index 1.
        with self.assertRaisesRegex(ValueError, "row 2: boolean label True"):
            frames.label_indices(pd.Series(["true", 0, True], name="label", dtype=object),
                                 CLASSES)

    def test_refuses_missing_and_fractional_labels(self):
        with self.assertRaisesRegex(ValueError, "row 1: nan is neither"):
            frames.label_indices(pd.Series([1.0, np.nan], name="label"), CLASSES)
        with self.assertRaisesRegex(ValueError, "row 0: 0.5 is neither"):
            frames.label_indices(pd.Series([0.5], name="label"), CLASSES)

    def test_nullable_integer_labels_pass_or_name_the_missing_row(self):
        # pandas' nullable Int64 (read_csv(dtype="Int64"), or an integer column with a gap):
        # integers pass as indices; a missing one is refused, like NaN above, naming the
        # column and row (the module's promise for every check).
        np.testing.assert_array_equal(
            frames.label_indices(pd.Series([1, 0], name="label", dtype="Int64"), CLASSES),
            [1, 0])
        with self.assertRaisesRegex(ValueError, "column 'label', row 1: "):
            frames.label_indices(pd.Series([1, None, 0], name="label", dtype="Int64"),
                                 CLASSES)

    def test_categorical_names(self):
        labels = pd.Series(["true", "false"], name="label", dtype="category")
        self.assertTrue(frames.needs_class_names(labels))
        np.testing.assert_array_equal(frames.label_indices(labels, CLASSES), [1, 0])


class PosteriorFrameTest(unittest.TestCase):

    def test_columns_item_label_confidence_then_classes(self):
        frame = frames.posterior_frame(["a", "b"], [[0.2, 0.8], [0.9, 0.1]], [1, 0],
                                       [0.8, 0.9], CLASSES)
        self.assertEqual(list(frame.columns), ["item", "label", "confidence", "false", "true"])
        self.assertEqual(frame["label"].tolist(), ["true", "false"])
        np.testing.assert_allclose(frame["true"], [0.8, 0.1])

    def test_256_classes_give_no_warning(self):
        # A project may have 256 classes; the frame is built without pandas' fragmentation
        # PerformanceWarning (one per column past 100 inserted one at a time).
        classes = ["c%d" % k for k in range(256)]
        probabilities = np.full((3, 256), 1 / 256)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            frame = frames.posterior_frame(["a", "b", "c"], probabilities, [0, 1, 2],
                                           [1 / 256] * 3, classes)
        self.assertEqual(list(frame.columns), ["item", "label", "confidence"] + classes)
        self.assertEqual(frame["label"].tolist(), ["c0", "c1", "c2"])
        np.testing.assert_allclose(frame["c255"], [1 / 256] * 3)

    def test_a_class_named_like_a_column_overwrites_nothing(self):
        # Classes "item" and "other": the item ids stay in "item", and every class column is
        # named "p_" + its class (as the CLI names them).
        frame = frames.posterior_frame(["a", "b"], [[0.2, 0.8], [0.9, 0.1]], [1, 0],
                                       [0.8, 0.9], ["item", "other"])
        self.assertEqual(list(frame.columns), ["item", "label", "confidence", "p_item", "p_other"])
        self.assertEqual(frame["item"].tolist(), ["a", "b"])
        self.assertEqual(frame["label"].tolist(), ["other", "item"])
        np.testing.assert_allclose(frame["p_item"], [0.2, 0.9])
        # A detail column's name (added by posteriors(details=True)) counts too.
        self.assertEqual(frames.class_columns(["difficulty", "x"]), ["p_difficulty", "p_x"])
        self.assertEqual(frames.class_columns(["cat", "dog"]), ["cat", "dog"])

    def test_empty(self):
        frame = frames.posterior_frame([], np.zeros((0, 2)), [], [], CLASSES)
        self.assertEqual(frame.shape, (0, 5))


if __name__ == "__main__":
    junit.main()
