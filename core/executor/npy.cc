#include "core/executor/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/checked_count.h"
#include "core/base/status_macros.h"

namespace quantd::executor {
namespace {

using TP = onnx::TensorProto;

constexpr absl::string_view kMagic("\x93NUMPY", 6);

struct Descr {
  const char* text;
  DataType type;
};
// '|' marks byte-sized types, which have no byte order.
constexpr Descr kDescrs[] = {
    {"<f4", TP::FLOAT},  {"<f8", TP::DOUBLE}, {"<f2", TP::FLOAT16},
    {"<i8", TP::INT64},  {"<i4", TP::INT32},  {"<i2", TP::INT16},
    {"|i1", TP::INT8},   {"<u8", TP::UINT64}, {"<u4", TP::UINT32},
    {"<u2", TP::UINT16}, {"|u1", TP::UINT8},  {"|b1", TP::BOOL}};

// The value of 'key' in the header dict: a quoted string, a bool or a tuple.
absl::StatusOr<std::string> DictValue(absl::string_view header,
                                      absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t at = header.find(quoted);
  if (at == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy header has no ", quoted));
  }
  at = header.find(':', at + quoted.size());
  if (at == absl::string_view::npos) {
    return absl::InvalidArgumentError(".npy header is malformed");
  }
  absl::string_view rest =
      absl::StripLeadingAsciiWhitespace(header.substr(at + 1));
  size_t end;
  if (!rest.empty() && rest[0] == '(') {
    end = rest.find(')');
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(".npy shape tuple is not closed");
    }
    return std::string(rest.substr(1, end - 1));
  }
  if (!rest.empty() && (rest[0] == '\'' || rest[0] == '"')) {
    end = rest.find(rest[0], 1);
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(".npy header string is not closed");
    }
    return std::string(rest.substr(1, end - 1));
  }
  end = rest.find_first_of(",}");
  return std::string(absl::StripAsciiWhitespace(rest.substr(0, end)));
}

}  // namespace

absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != kMagic) {
    return absl::InvalidArgumentError("not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_at;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<unsigned char>(bytes[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::InvalidArgumentError("truncated .npy");
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_at = 12;
  } else {
    return absl::UnimplementedError(
        absl::StrCat(".npy format version ", major, " is not supported"));
  }
  if (bytes.size() < header_at + header_len) {
    return absl::InvalidArgumentError("truncated .npy header");
  }
  const absl::string_view header = bytes.substr(header_at, header_len);
  QUANTD_ASSIGN_OR_RETURN(std::string descr, DictValue(header, "descr"));
  QUANTD_ASSIGN_OR_RETURN(std::string fortran,
                          DictValue(header, "fortran_order"));
  QUANTD_ASSIGN_OR_RETURN(std::string shape_text, DictValue(header, "shape"));
  if (fortran != "False") {
    return absl::UnimplementedError(
        "Fortran-order .npy files are not supported");
  }
  std::string d = descr;
  // A byte-sized type may be written with '<' or '=' too.
  if (d.size() == 3 && d[2] == '1' && d[0] != '>') d[0] = '|';
  if (d.size() == 3 && d[0] == '=') d[0] = '<';
  DataType type = TP::UNDEFINED;
  for (const Descr& c : kDescrs) {
    if (d == c.text) type = c.type;
  }
  if (type == TP::UNDEFINED) {
    return absl::UnimplementedError(
        absl::StrCat(".npy element type '", descr, "' is not supported"));
  }
  std::vector<int64_t> shape;
  for (absl::string_view part :
       absl::StrSplit(shape_text, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(".npy shape '(", shape_text, ")' is malformed"));
    }
    shape.push_back(v);
  }
  // The header's shape is untrusted: count it without wrapping and compare
  // with the data before allocating anything.
  absl::StatusOr<int64_t> count = CheckedElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy header: ", count.status().message()));
  }
  absl::StatusOr<int64_t> want = CheckedByteSize(*count, ElementSize(type));
  if (!want.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy header: ", want.status().message()));
  }
  const size_t data_at = header_at + header_len;
  if (static_cast<uint64_t>(bytes.size() - data_at) !=
      static_cast<uint64_t>(*want)) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy data is ", bytes.size() - data_at,
                     " bytes, the header says ", *want));
  }
  return Tensor::FromBytes(type, std::move(shape),
                           absl::string_view(bytes).substr(data_at));
}

absl::StatusOr<Tensor> ReadNpyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream s;
  s << in.rdbuf();
  absl::StatusOr<Tensor> t = ParseNpy(s.str());
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

std::string SerializeNpy(const Tensor& t) {
  const char* descr = "<f4";
  for (const Descr& c : kDescrs) {
    if (c.type == t.dtype()) descr = c.text;
  }
  std::string shape;
  for (int64_t d : t.shape()) absl::StrAppend(&shape, d, ",");
  if (t.rank() > 1) shape.pop_back();  // (n,) keeps its comma, (a,b) not.
  std::string header =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad so the data starts at a multiple of 64 bytes, ending with '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.bytes());
  return out;
}

absl::Status WriteNpyFile(const std::string& path, const Tensor& t) {
  std::ofstream out(path, std::ios::binary);
  const std::string bytes = SerializeNpy(t);
  out.write(bytes.data(), bytes.size());
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace quantd::executor
