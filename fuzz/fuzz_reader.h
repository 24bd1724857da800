// A tiny byte reader for the structured fuzz targets (request_stream_fuzzer,
// options_fuzzer): the input decoded front to back, little-endian, with
// every read defined past the end (zeros).
//
// Not libFuzzer's FuzzedDataProvider: that header ships with clang only, and
// the replay binaries (fuzz/structured_corpus_main.cc) are built by any
// compiler. One reader in both builds also means a corpus file decodes to the
// same actions under libFuzzer and in the ctest, and the seed generators
// (make_stream_seeds.py) can write inputs by hand in the same simple order.
#ifndef QUANTD_FUZZ_FUZZ_READER_H_
#define QUANTD_FUZZ_FUZZ_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace quantd::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ == size_; }

  // The next byte, 0 once the input is used up.
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = U8();
    return static_cast<uint16_t>(lo | (uint16_t{U8()} << 8));
  }
  uint32_t U32() {
    const uint32_t lo = U16();
    return lo | (uint32_t{U16()} << 16);
  }
  uint64_t U64() {
    const uint64_t lo = U32();
    return lo | (uint64_t{U32()} << 32);
  }
  bool Bool() { return (U8() & 1) != 0; }
  // One of `n` choices (n > 0) from one byte: mutating the byte moves
  // between neighbouring choices, which keeps the decoding local.
  size_t Pick(size_t n) { return U8() % n; }

  // Up to `n` bytes (fewer at the end of the input).
  std::string Bytes(size_t n) {
    if (n > remaining()) n = remaining();
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  // Everything left.
  std::string Rest() { return Bytes(remaining()); }

 private:
  const uint8_t* const data_;
  const size_t size_;
  size_t pos_ = 0;
};

}  // namespace quantd::fuzz

#endif  // QUANTD_FUZZ_FUZZ_READER_H_
