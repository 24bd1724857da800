// The short, deterministic version of the structured fuzz targets
// (request_stream_fuzzer.cc, options_fuzzer.cc) for CI: no libFuzzer, any
// compiler. Runs the target's LLVMFuzzerTestOneInput on every file of its
// seed corpus and then on a fixed number of mutations of those seeds from a
// fixed-seed PRNG, so a failure reproduces exactly. The mutations are
// generic (the targets decode bytes in order, fuzz_reader.h, or parse
// protobuf): byte edits, truncations, insertions, small integer and varint
// changes, and splices of two seeds.
//
//   <target>_corpus [--mutations=N] [--seed=S] [--skip=PREFIX]...
//                   <corpus dir or file>...
//
// --skip leaves out corpus files whose name starts with PREFIX: a reproducer
// of a bug not fixed yet (regress_*) stays in the corpus, for libFuzzer and
// by hand, without failing CI.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

 private:
  std::mt19937_64 engine_;
};

// Bytes the decoders branch on: small choices (op codes, modes), the ends of
// the ranges, protobuf tags of short fields, varint continuation.
constexpr uint8_t kInteresting[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
                                    0x06, 0x07, 0x08, 0x0a, 0x12, 0x1a,
                                    0x7f, 0x80, 0xff, 0xfe, 0x10, 0x40};

void Mutate(std::string* s, const std::vector<std::string>& seeds, Rng* rng) {
  const size_t at = rng->Below(s->size() + 1);
  const size_t last = s->empty() ? 0 : std::min(at, s->size() - 1);
  switch (rng->Below(9)) {
    case 0:  // Flip one bit.
      if (!s->empty()) (*s)[last] ^= static_cast<char>(1 << rng->Below(8));
      break;
    case 1:  // Truncate.
      s->resize(at);
      break;
    case 2:  // Insert a byte.
      s->insert(at, 1, static_cast<char>(rng->Below(256)));
      break;
    case 3:  // Overwrite with a byte the decoders branch on.
      if (!s->empty()) {
        (*s)[last] =
            static_cast<char>(kInteresting[rng->Below(sizeof(kInteresting))]);
      }
      break;
    case 4:  // Erase a few bytes.
      s->erase(at, 1 + rng->Below(8));
      break;
    case 5:  // Add or subtract a little: the next mode, size or enum value.
      if (!s->empty()) {
        (*s)[last] = static_cast<char>((*s)[last] + rng->Below(5) - 2);
      }
      break;
    case 6: {  // Duplicate a slice in place (a message sent twice).
      const size_t len = rng->Below(s->size() - std::min(at, s->size()) + 1);
      s->insert(at, s->substr(at, len));
      break;
    }
    case 7: {  // Splice: our head with another seed's tail.
      const std::string& other = seeds[rng->Below(seeds.size())];
      s->resize(at);
      *s += other.substr(rng->Below(other.size() + 1));
      break;
    }
    case 8:  // Append another seed whole.
      *s += seeds[rng->Below(seeds.size())];
      break;
  }
}

bool ReadFile(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in),
              std::istreambuf_iterator<char>());
  return true;
}

bool Skipped(const std::filesystem::path& path,
             const std::vector<std::string>& skip) {
  const std::string name = path.filename().string();
  for (const std::string& prefix : skip) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mutations = 1000;
  uint64_t seed = 14;
  std::vector<std::string> skip;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--mutations=", 0) == 0) {
      mutations = std::strtoull(arg.c_str() + 12, nullptr, 10);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    } else if (arg.rfind("--skip=", 0) == 0) {
      skip.push_back(arg.substr(7));
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file() && !Skipped(entry.path(), skip)) {
          files.push_back(entry.path());
        }
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
                 "usage: %s [--mutations=N] [--seed=S] [--skip=PREFIX]... "
                 "<corpus dir|file>...\n",
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
  std::printf("%s: %zu seeds + %zu mutations, no finding, %.2f s\n",
              std::filesystem::path(argv[0]).filename().c_str(), seeds.size(),
              mutations, seconds);
  std::fflush(stdout);
  // A target may keep a server and its threads for the whole process
  // (request_stream_fuzzer.cc); leave without tearing them down, as
  // libFuzzer does.
  std::_Exit(0);
}
