#!/usr/bin/python3
"""Writes the seed corpus of the request-stream fuzzer:
fuzz/corpus/request_stream/.

Run:  /usr/bin/python3 fuzz/make_stream_seeds.py

Each seed is one call in the byte format that fuzz/request_stream_fuzzer.cc
decodes (its header comment is the reference; fuzz/fuzz_reader.h reads it):
the well-formed calls of both RPCs, and one of each way the protocol can be
broken, so that every refusal of server/job_reactor.cc is a seed away.
"""

import os
import shutil
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                   "request_stream")

# Header bits.
QUANTIZE, CALIBRATE = 0, 1
UNSET, STATIC, DYNAMIC, STATIC_RANGES = 0, 1, 2, 3
MIN_MAX, NO_OBSERVER, PERCENTILE, BOGUS = 0, 1, 2, 3
# kOutcomes indices and the strict bit.
OK, INVALID, PRECONDITION, EXHAUSTED, UNIMPLEMENTED_LONG = 0, 3, 4, 5, 6
STRICT = 8


def header(rpc=QUANTIZE, method=UNSET, observer=MIN_MAX, job=OK):
    return bytes([rpc | method << 1 | observer << 3, job])


def config(size=None, mode=None, external=b"\x00"):
    """Size modes of DeclaredSize: 0 u16, 1 zero, 2 max, 3 max+1, 4 2^64-1,
    5 2^63, 6 u8, 7 u32. `external`: the DeclaredExternal bytes (none by
    default; see external_size)."""
    if mode is None:
        return bytes([0, 0]) + struct.pack("<H", size) + external
    return bytes([0, mode]) + external


def external_size(size=None, mode=None):
    """DeclaredExternal: a u8 size, or a DeclaredSize mode."""
    if mode is None:
        return bytes([2, size])
    return bytes([3, mode])


def external(n=None, mode=None):
    """An external_data_chunk; length modes as chunk's."""
    if mode is None:
        return bytes([6, 0]) + struct.pack("<H", n)
    return bytes([6, mode])


def chunk(n=None, mode=None):
    """Length modes of ChunkLength: 0 u16, 1 what is owed, 2 owed + 1,
    3 owed - 1, 4 empty, 5 u8."""
    if mode is None:
        return bytes([1, 0]) + struct.pack("<H", n)
    return bytes([1, mode])


REST, REST_PLUS_1, REST_MINUS_1, EMPTY = 1, 2, 3, 4

# Tensor choices (indices into DecodeTensor's tables).
X, UNNAMED, Y, LONG_NAME, BAD_UTF8 = 0, 1, 2, 4, 5
FLOAT, FLOAT16, INT32, UNDEFINED, BAD_TYPE = 0, 2, 3, 4, 7
D2, D1, D0, D3, D64, DNEG, D2POW40, DMAX = range(8)
FITTING, U8_LENGTH, NO_DATA, FITTING_PLUS_1 = range(4)


def tensor(name=X, dtype=FLOAT, dims=(D2, D64), data=FITTING, length=0):
    out = bytes([name, dtype, len(dims)]) + bytes(dims) + bytes([data])
    if data == U8_LENGTH:
        out += bytes([length])
    return out


def batch(*tensors):
    return bytes([3, len(tensors)]) + b"".join(tensors)


def empty():
    return bytes([5])


def end(cancel=False):
    return bytes([7, 1 if cancel else 0])


def model(size=1000):
    return config(size) + chunk(mode=REST)


def seeds():
    good = batch(tensor())
    # Well-formed calls.
    yield "quantize_no_method", header() + model() + end()
    yield "quantize_two_chunks", (header() + config(1000) + chunk(400) +
                                  chunk(mode=REST) + end())
    yield "quantize_empty_chunk", (header() + config(10) + chunk(mode=EMPTY) +
                                   chunk(mode=REST) + end())
    yield "quantize_static_batches", (header(method=STATIC) + model() + good +
                                      good + end())
    yield "quantize_static_no_batches", header(method=STATIC) + model() + end()
    yield "quantize_static_ranges", (header(method=STATIC_RANGES) + model() +
                                     end())
    yield "quantize_dynamic", header(method=DYNAMIC) + model() + end()
    yield "quantize_big_model", (header() + config(mode=2) +
                                 chunk(65535) * 4 + chunk(mode=REST) + end())
    yield "calibrate_batches", (header(CALIBRATE) + model() + good * 3 + end())
    yield "calibrate_no_batches", header(CALIBRATE) + model() + end()
    yield "calibrate_percentile", (header(CALIBRATE, observer=PERCENTILE) +
                                   model() + good + end())
    yield "calibrate_max_batches", (header(CALIBRATE) + model() + good * 6 +
                                    end())
    # The job refuses (core's errors pass through, the long one capped).
    yield "calibrate_job_invalid", (header(CALIBRATE, job=INVALID) + model() +
                                    good + end())
    yield "quantize_job_unimplemented_long", (
        header(job=UNIMPLEMENTED_LONG) + model() + end())
    yield "calibrate_job_exhausted", (header(CALIBRATE, job=EXHAUSTED) +
                                      model() + end())
    # Hostile batch tensors, checked by TensorFromNamed in the strict job.
    yield "calibrate_strict_batches", (
        header(CALIBRATE, job=STRICT) + model() +
        batch(tensor(data=FITTING_PLUS_1)) +
        batch(tensor(UNNAMED, INT32, (D3, D1))) +
        batch(tensor(LONG_NAME, BAD_TYPE, (DNEG,), U8_LENGTH, 12)) +
        batch(tensor(Y, FLOAT16, (D2POW40, D2POW40), NO_DATA)) +
        batch(tensor(Y, UNDEFINED, (DMAX, D2)), tensor(X, FLOAT, ())) +
        batch() + end())
    # Broken streams, one refusal each.
    yield "empty_stream", header() + end()
    yield "empty_stream_calibrate", header(CALIBRATE) + end()
    yield "chunk_before_config", header() + chunk(10) + end()
    yield "batch_before_config", header(CALIBRATE) + good + end()
    yield "empty_message_first", header() + empty() + end()
    yield "zero_model_size", header() + config(mode=1) + end()
    yield "model_over_limit", header() + config(mode=3) + chunk(10) + end()
    yield "model_size_max_u64", header(CALIBRATE) + config(mode=4) + end()
    yield "model_size_2pow63", header() + config(mode=5) + end()
    yield "config_twice", header() + config(10) + config(10) + end()
    yield "config_after_model", header(CALIBRATE) + model() + config(10) + end()
    yield "config_after_batch", (header(CALIBRATE) + model() + good +
                                 config(10) + end())
    yield "more_bytes_than_declared", (header() + config(100) +
                                       chunk(mode=REST_PLUS_1) + end())
    yield "chunk_after_model", (header() + model() + chunk(1) + end())
    yield "fewer_bytes_than_declared", (header(CALIBRATE) + config(100) +
                                        chunk(mode=REST_MINUS_1) + end())
    yield "no_chunk", header() + config(100) + end()
    yield "batch_before_model_complete", (header(method=STATIC) + config(100) +
                                          chunk(50) + good + end())
    yield "chunk_after_batch", (header(CALIBRATE) + model() + good + chunk(1) +
                                end())
    yield "empty_message_after_model", (header() + model() + empty() + end())
    yield "empty_message_after_batch", (header(CALIBRATE) + model() + good +
                                        empty() + end())
    yield "too_many_batches", (header(CALIBRATE) + model() + good * 7 + end())
    yield "too_many_batches_quantize", (header(method=STATIC) + model() +
                                        good * 8 + end())
    # Models sent with external data.
    ext = config(1000, external=external_size(200)) + chunk(mode=REST)
    yield "external_whole", (header(method=DYNAMIC) + ext +
                             external(mode=REST) + end())
    yield "external_in_pieces", (header() + ext + external(50) +
                                 external(mode=EMPTY) + external(mode=REST) +
                                 end())
    yield "external_then_batches", (header(method=STATIC) + ext +
                                    external(mode=REST) + good + good + end())
    yield "external_calibrate", (header(CALIBRATE) + ext +
                                 external(mode=REST) + good + end())
    yield "external_before_model_complete", (
        header() + config(1000, external=external_size(200)) + chunk(10) +
        external(mode=REST) + end())
    yield "external_not_declared", (header() + model() + external(10) + end())
    yield "external_too_long", (header() + ext + external(mode=REST_PLUS_1) +
                                end())
    yield "external_short_at_end", (header(CALIBRATE) + ext +
                                    external(mode=REST_MINUS_1) + end())
    yield "external_never_sent", header() + ext + end()
    yield "external_batch_before_complete", (
        header(method=STATIC) + ext + external(20) + good + end())
    yield "external_then_model_chunk", (header() + ext + external(20) +
                                        chunk(1) + end())
    yield "external_over_limit", (header() +
                                  config(1000, external=external_size(mode=2)) +
                                  end())
    yield "external_size_max_u64", (
        header() + config(1000, external=external_size(mode=4)) + end())
    yield "external_cancel_mid_stream", (header() + ext + external(100) +
                                         end(cancel=True))
    # The client cancels: before config, mid-model, mid-batches, after an
    # error.
    yield "cancel_first", header() + end(cancel=True)
    yield "cancel_mid_model", (header() + config(1000) + chunk(10) +
                               end(cancel=True))
    yield "cancel_mid_batches", (header(CALIBRATE) + model() + good * 2 +
                                 end(cancel=True))
    yield "cancel_after_error", (header() + chunk(10) + end(cancel=True))
    yield "cancel_complete_model", header() + model() + end(cancel=True)
    yield from regressions()


def regressions():
    """Reproducers of bugs found by fuzzing, fixed, replayed in CI.

    A batch whose tensor name is not UTF-8 failed to parse on the server;
    gRPC reported a failed read, which JobReactor::OnReadDone took for the
    client's half-close: the call ended OK with batch_count 1 (the batches
    from the bad one on silently dropped). Now INVALID_ARGUMENT: the
    service's streams are raw and the reactor parses each message."""
    good = batch(tensor())
    yield "regress_invalid_utf8_batch_name", (
        header(CALIBRATE) + model() + good + batch(tensor(BAD_UTF8)) + good +
        end())
    # A cancel handled while JobReactor::StartJob was creating the batch
    # queue of the first batch: StopJob found no queue to abort, and the job
    # waited in BatchQueue::Pop forever (holding its job slot). StartJob now
    # checks for a finished call under the lock that publishes the queue.
    # Racy: run it a few thousand times, e.g.
    # request_stream_fuzzer -runs=4000 <this file>.
    yield "regress_cancel_as_the_job_starts", (
        header(CALIBRATE) + model() + good + end(cancel=True))


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    for name, data in seeds():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(os.listdir(OUT)), OUT))


if __name__ == "__main__":
    main()
