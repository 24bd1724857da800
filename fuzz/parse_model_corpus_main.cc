// The short, deterministic version of fuzz/parse_model_fuzzer.cc for CI (the
// ctest parse_model_fuzz_corpus): no libFuzzer, any compiler. Runs the fuzz
// entry point on every file of a seed corpus and then on a fixed number of
// mutations of those seeds from a fixed-seed PRNG, so a failure reproduces
// exactly. The mutations aim at what the walker in model_io.cc decides on:
// tags and length varints (re-encoded, off by one, over-long), truncations
// and merges of whole messages.
//
//   parse_model_corpus [--mutations=N] [--seed=S] <corpus dir or file>...
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
}

// std::mt19937_64's output is fully specified by the standard (unlike the
// distributions), so the mutations are the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform enough in [0, n) for n far below 2^64; 0 when n == 0.
  size_t Below(size_t n) { return n == 0 ? 0 : engine_() % n; }
  bool OneIn(size_t n) { return Below(n) == 0; }

 private:
  std::mt19937_64 engine_;
};

std::string Varint(uint64_t value, size_t min_bytes) {
  std::string out;
  do {
    uint8_t byte = value & 0x7f;
    value >>= 7;
    if (value != 0 || out.size() + 1 < min_bytes) byte |= 0x80;
    out.push_back(static_cast<char>(byte));
  } while (value != 0 || out.size() < min_bytes);
  return out;
}

// Decodes the varint at `at` (at most 10 bytes); its length, or 0.
size_t DecodeVarint(const std::string& s, size_t at, uint64_t* value) {
  *value = 0;
  for (size_t i = 0; i < 10 && at + i < s.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(s[at + i]);
    *value |= uint64_t{byte & 0x7fu} << (7 * i);
    if (byte < 0x80) return i + 1;
  }
  return 0;
}

// Bytes the walker and protobuf branch on: tags of the fields the walker
// claims (graph 7, initializer 5, raw_data 9), group and end-group tags, tag
// 0, continuation bits.
constexpr uint8_t kInteresting[] = {0x3a, 0x2a, 0x4a, 0x0b, 0x0c, 0x3b,
                                    0x3c, 0x00, 0x80, 0xff, 0x7f, 0x01};

void Mutate(std::string* s, const std::vector<std::string>& seeds, Rng* rng) {
  const size_t at = rng->Below(s->size() + 1);
  switch (rng->Below(9)) {
    case 0:  // Flip one bit.
      if (!s->empty()) {
        (*s)[std::min(at, s->size() - 1)] ^=
            static_cast<char>(1 << rng->Below(8));
      }
      break;
    case 1:  // Truncate.
      s->resize(at);
      break;
    case 2:  // Insert a byte.
      s->insert(at, 1, static_cast<char>(rng->Below(256)));
      break;
    case 3:  // Overwrite with a byte the parsers branch on.
      if (!s->empty()) {
        (*s)[std::min(at, s->size() - 1)] =
            static_cast<char>(kInteresting[rng->Below(sizeof(kInteresting))]);
      }
      break;
    case 4:  // Erase a few bytes.
      s->erase(at, 1 + rng->Below(8));
      break;
    case 5:
    case 6: {  // Re-encode a varint: off by a little, or over-long.
      uint64_t value = 0;
      const size_t n = DecodeVarint(*s, at, &value);
      if (n == 0) break;
      const int delta = static_cast<int>(rng->Below(5)) - 2;
      const bool overlong = rng->OneIn(2);
      const uint64_t edited = overlong ? value : value + delta;
      s->replace(at, n, Varint(edited, overlong ? n + 1 + rng->Below(6) : 1));
      break;
    }
    case 7:  // Append another seed: parsing concatenations merges messages.
      *s += seeds[rng->Below(seeds.size())];
      break;
    case 8: {  // Duplicate a slice in place.
      const size_t len = rng->Below(s->size() - std::min(at, s->size()) + 1);
      s->insert(at, s->substr(at, len));
      break;
    }
  }
}

bool ReadFile(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in),
              std::istreambuf_iterator<char>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mutations = 20000;
  uint64_t seed = 14;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--mutations=", 0) == 0) {
      mutations = std::strtoull(arg.c_str() + 12, nullptr, 10);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.push_back(arg);
    }
  }
  // Directory order is unspecified; sorted, the mutations are reproducible.
  std::sort(files.begin(), files.end());
  std::vector<std::string> seeds;
  for (const auto& path : files) {
    std::string bytes;
    if (!ReadFile(path, &bytes)) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    seeds.push_back(std::move(bytes));
  }
  if (seeds.empty()) {
    std::fprintf(stderr,
                 "usage: %s [--mutations=N] [--seed=S] <corpus dir|file>...\n",
                 argv[0]);
    return 2;
  }

  const auto start = std::chrono::steady_clock::now();
  for (const std::string& s : seeds) Run(s);
  Rng rng(seed);
  for (size_t i = 0; i < mutations; ++i) {
    std::string input = seeds[rng.Below(seeds.size())];
    for (size_t n = 1 + rng.Below(3); n > 0; --n) Mutate(&input, seeds, &rng);
    Run(input);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "parse_model_corpus: %zu seeds + %zu mutations, no "
      "disagreement, %.2f s\n",
      seeds.size(), mutations, seconds);
  return 0;
}
