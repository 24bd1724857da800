#include "server/chunk_wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace quantd::server {
namespace {

constexpr int kLengthDelimited = 2;
// A length on the wire: protobuf reads at most 5 varint bytes and at most
// INT_MAX.
constexpr int kMaxLengthBytes = 5;
// One tag byte (fields 1..15) plus the longest length.
constexpr size_t kMaxHeaderBytes = 1 + kMaxLengthBytes;

// Copies up to `n` bytes from the start of `slices` into `out`.
size_t Peek(const std::vector<grpc::Slice>& slices, uint8_t* out, size_t n) {
  size_t got = 0;
  for (const grpc::Slice& slice : slices) {
    const size_t take = std::min(n - got, slice.size());
    std::memcpy(out + got, slice.begin(), take);
    got += take;
    if (got == n) break;
  }
  return got;
}

// Writes `value` as a varint at `out`; returns its length (at most 10).
size_t PutVarint(uint64_t value, uint8_t* out) {
  size_t n = 0;
  for (; value >= 0x80; value >>= 7) {
    out[n++] = static_cast<uint8_t>((value & 0x7f) | 0x80);
  }
  out[n++] = static_cast<uint8_t>(value);
  return n;
}

void UnrefOwner(void* owner) {
  delete static_cast<std::shared_ptr<const std::string>*>(owner);
}

}  // namespace

bool FindSoleBytesField(const std::vector<grpc::Slice>& slices, int field,
                        WireField* found) {
  if (field < 1 || field > 15) return false;  // One tag byte only.
  size_t total = 0;
  for (const grpc::Slice& slice : slices) total += slice.size();
  uint8_t header[kMaxHeaderBytes];
  const size_t have = Peek(slices, header, sizeof(header));
  if (have < 2 || header[0] != ((field << 3) | kLengthDelimited)) return false;
  uint64_t length = 0;
  size_t at = 1;
  for (int shift = 0;; shift += 7) {
    if (at >= have || at > kMaxLengthBytes) return false;
    const uint8_t byte = header[at++];
    length |= uint64_t{byte & 0x7fu} << shift;
    if (byte < 0x80) break;
  }
  if (length > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
      at + length != total) {
    return false;
  }
  found->offset = at;
  found->size = static_cast<size_t>(length);
  return true;
}

std::vector<grpc::Slice> SubSlices(const std::vector<grpc::Slice>& slices,
                                   size_t offset, size_t size) {
  std::vector<grpc::Slice> out;
  for (const grpc::Slice& slice : slices) {
    if (size == 0) break;
    if (offset >= slice.size()) {
      offset -= slice.size();
      continue;
    }
    const size_t take = std::min(size, slice.size() - offset);
    out.push_back(slice.sub(offset, offset + take));
    size -= take;
    offset = 0;
  }
  return out;
}

void AppendSliceBytes(const std::vector<grpc::Slice>& slices, size_t offset,
                      size_t size, std::string* out) {
  for (const grpc::Slice& piece : SubSlices(slices, offset, size)) {
    out->append(reinterpret_cast<const char*>(piece.begin()), piece.size());
  }
}

grpc::Slice SoleBytesFieldHeader(int field, size_t size) {
  uint8_t header[2 * 10];
  size_t n = PutVarint(
      (uint64_t{static_cast<uint32_t>(field)} << 3) | kLengthDelimited, header);
  n += PutVarint(size, header + n);
  return grpc::Slice(header, n);
}

grpc::ByteBuffer SoleBytesFieldMessage(
    int field, const std::shared_ptr<const std::string>& owner, size_t offset,
    size_t size) {
  if (size == 0) {
    grpc::Slice only = SoleBytesFieldHeader(field, 0);
    return grpc::ByteBuffer(&only, 1);
  }
  grpc::Slice slices[2] = {
      SoleBytesFieldHeader(field, size),
      grpc::Slice(const_cast<char*>(owner->data()) + offset, size, UnrefOwner,
                  new std::shared_ptr<const std::string>(owner))};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace quantd::server
