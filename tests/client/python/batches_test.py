"""Unit tests of quantd_client.batches (no server)."""

import os
import tempfile
import unittest

import numpy as np
from onnx import numpy_helper

from quantd_client import ArrayBatches, NpyBatches, named_tensor, to_tensor_batch


def decode(named):
    dtype = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_}
    return np.frombuffer(named.data, dtype=np.dtype(dtype[named.data_type]).newbyteorder("<")) \
        .reshape(tuple(named.shape))


class BatchesTest(unittest.TestCase):

    def setUp(self):
        self.tmp = self.enterContext(tempfile.TemporaryDirectory())

    def save(self, name, array):
        path = os.path.join(self.tmp, name)
        np.save(path, array)
        return path

    def test_cuts_samples_into_batches_the_last_smaller(self):
        x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
        batches = list(NpyBatches(self.save("x.npy", x), batch_size=4))
        self.assertEqual([list(b.tensors[0].shape) for b in batches], [[4, 3], [4, 3], [2, 3]])
        self.assertEqual(batches[0].tensors[0].name, "")
        np.testing.assert_array_equal(np.concatenate([decode(b.tensors[0]) for b in batches]), x)

    def test_zips_named_inputs_sample_by_sample(self):
        a = np.arange(6, dtype=np.int64).reshape(6, 1)
        m = np.arange(12, dtype=np.uint8).reshape(6, 2)
        source = NpyBatches({"ids": self.save("a.npy", a), "mask": self.save("m.npy", m)}, 5)
        self.assertEqual((source.num_samples, source.num_batches), (6, 2))
        last = list(source)[-1]
        self.assertEqual([t.name for t in last.tensors], ["ids", "mask"])
        np.testing.assert_array_equal(decode(last.tensors[0]), a[5:])
        np.testing.assert_array_equal(decode(last.tensors[1]), m[5:])
        # Re-iterable: a retried or repeated call sends the same batches.
        self.assertEqual(len(list(source)), 2)

    def test_float64_is_sent_as_float32_and_big_endian_as_little(self):
        t = named_tensor("x", np.array([[1.5, -2.25]], dtype=">f8"))
        self.assertEqual(t.data_type, 1)
        self.assertEqual(t.data, np.array([1.5, -2.25], dtype="<f4").tobytes())
        t = named_tensor("y", np.array([1, 2], dtype=">i4"))
        self.assertEqual(t.data, np.array([1, 2], dtype="<i4").tobytes())

    def test_float16_is_sent_as_float32_and_wider_integers_as_they_are(self):
        t = named_tensor("h", np.array([1.0, -2.5, 1 / 3], dtype=np.float16))
        self.assertEqual(t.data_type, 1)
        self.assertEqual(t.data, np.array([1.0, -2.5, 0.333251953125], dtype="<f4").tobytes())
        for dtype, onnx_type in (("<u2", 4), ("<i2", 5), ("<u4", 12), (">u8", 13)):
            t = named_tensor("i", np.array([3, 4], dtype=dtype))
            self.assertEqual(t.data_type, onnx_type, dtype)
            self.assertEqual(t.data, np.array([3, 4], dtype="<" + dtype[1:]).tobytes())
        batches = list(NpyBatches(self.save("h.npy", np.ones((3, 2), np.float16)), batch_size=2))
        self.assertEqual(batches[0].tensors[0].data_type, 1)
        self.assertEqual(list(batches[0].tensors[0].shape), [2, 2])

    def test_different_sample_counts_name_the_files(self):
        with self.assertRaises(ValueError) as ctx:
            NpyBatches([("a", self.save("a.npy", np.zeros((3, 2), np.float32))),
                        ("b", self.save("b.npy", np.zeros((4, 2), np.float32)))])
        self.assertIn("a.npy has 3", str(ctx.exception))
        self.assertIn("b.npy has 4", str(ctx.exception))

    def test_sample_axes_and_whole_inputs(self):
        # A recurrent state [layers, batch, hidden] is cut along axis 1; a
        # scalar (a sample rate) and an array given None go whole.
        state = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
        batches = list(ArrayBatches(
            {"x": np.zeros((3, 4), np.float32), "state": state,
             "sr": np.array(16000, np.int64), "table": np.array([7, 8], np.float32)},
            batch_size=2, sample_axes={"state": 1, "table": None}))
        self.assertEqual(len(batches), 2)
        x, st, sr, table = batches[0].tensors
        self.assertEqual(list(st.shape), [2, 2, 2])
        np.testing.assert_array_equal(np.frombuffer(st.data, np.float32),
                                      state[:, 0:2].ravel())
        self.assertEqual((list(sr.shape), np.frombuffer(sr.data, np.int64)[0]), ([], 16000))
        self.assertEqual(list(table.shape), [2])
        self.assertEqual(list(batches[1].tensors[1].shape), [2, 1, 2])
        np.testing.assert_array_equal(np.frombuffer(batches[1].tensors[1].data, np.float32),
                                      state[:, 2:3].ravel())

    def test_unbatched_sends_each_sample_without_its_axis(self):
        # A model that takes one image [3, 4] with no batch axis.
        images = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
        state = np.arange(2 * 2, dtype=np.float32).reshape(2, 2)
        batches = list(ArrayBatches({"image": images, "state": state},
                                    sample_axes={"state": 1}, unbatched=True))
        self.assertEqual(len(batches), 2)
        for i, batch in enumerate(batches):
            image, st = batch.tensors
            self.assertEqual(list(image.shape), [3, 4])
            np.testing.assert_array_equal(np.frombuffer(image.data, np.float32),
                                          images[i].ravel())
            self.assertEqual(list(st.shape), [2])
            np.testing.assert_array_equal(np.frombuffer(st.data, np.float32), state[:, i])
        with self.assertRaises(ValueError) as ctx:
            ArrayBatches(images, batch_size=2, unbatched=True)
        self.assertIn("batch size must be 1, not 2", str(ctx.exception))
        self.assertEqual(ArrayBatches(images).batch_size, 32)

    def test_empty_samples_only_beside_samples_with_values(self):
        with self.assertRaisesRegex(ValueError, "no values"):
            list(ArrayBatches(np.zeros((1 << 20, 0), np.float32)))
        batches = list(ArrayBatches({"x": np.ones((2, 3), np.float32),
                                     "axes": np.zeros((2, 0), np.int64)}, batch_size=1))
        self.assertEqual(len(batches), 2)
        axes = [t for t in batches[0].tensors if t.name == "axes"][0]
        self.assertEqual(list(axes.shape), [1, 0])
        self.assertEqual(axes.data, b"")

    def test_refusals(self):
        x = self.save("x.npy", np.zeros((2, 2), np.float32))
        with self.assertRaisesRegex(ValueError, "two unnamed"):
            NpyBatches([x, x])
        with self.assertRaisesRegex(ValueError, "two calibration inputs for tensor 'x'"):
            NpyBatches([("x", x), ("x", x)])
        with self.assertRaisesRegex(ValueError, "batch size"):
            NpyBatches(x, batch_size=0)
        with self.assertRaisesRegex(ValueError, "scalar"):  # Nothing to cut along.
            ArrayBatches(np.float32(1.0))
        with self.assertRaisesRegex(ValueError, "out of range for an array of rank 2"):
            ArrayBatches({"x": np.zeros((2, 2))}, sample_axes={"x": 2})
        with self.assertRaisesRegex(ValueError, "no calibration input is given for"):
            ArrayBatches({"x": np.zeros((2, 2))}, sample_axes={"y": 1})
        with self.assertRaisesRegex(ValueError, "y has 3 on axis 1"):
            ArrayBatches({"x": np.zeros((2, 2)), "y": np.zeros((2, 3))}, sample_axes={"y": 1})
        with self.assertRaisesRegex(ValueError, "complex64 is not supported"):
            NpyBatches(self.save("c.npy", np.zeros((2, 2), np.complex64)))
        with self.assertRaisesRegex(ValueError, "no samples"):
            ArrayBatches(np.zeros((0, 2), np.float32))
        with self.assertRaises(FileNotFoundError):
            NpyBatches(os.path.join(self.tmp, "missing.npy"))

    def test_tensor_proto_files_use_their_own_name(self):
        path = os.path.join(self.tmp, "input_0.pb")
        with open(path, "wb") as f:
            f.write(numpy_helper.from_array(np.ones((3, 4), np.float32), "x").SerializeToString())
        batch = next(iter(NpyBatches(path, batch_size=2)))
        self.assertEqual(batch.tensors[0].name, "x")
        self.assertEqual(list(batch.tensors[0].shape), [2, 4])

    def test_to_tensor_batch(self):
        batch = to_tensor_batch({"a": np.zeros((1, 2), np.float32), "b": np.ones(3, np.bool_)})
        self.assertEqual([(t.name, t.data_type) for t in batch.tensors], [("a", 1), ("b", 9)])
        self.assertIs(to_tensor_batch(batch), batch)
        with self.assertRaises(TypeError):
            to_tensor_batch([1, 2, 3])


if __name__ == "__main__":
    unittest.main()
