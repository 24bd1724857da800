#include "core/calibration/memory_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/checked_count.h"

namespace quantd::calibration {

std::string ByteText(int64_t bytes) {
  if (bytes == kMaxCount) return "more than 8 EiB";
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " bytes");
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.4g %s", v, kUnits[unit]);
}

absl::Status MemoryBudget::Charge(int64_t bytes, absl::string_view what) {
  bytes = std::max<int64_t>(bytes, 0);
  absl::MutexLock lock(&mu_);
  const int64_t total = SaturatingAdd(used_, bytes);
  if (limit_ > 0 && total > limit_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " needs ", ByteText(bytes), " (", bytes,
                     " bytes), over the ", name_, " of ", ByteText(limit_),
                     " (", ByteText(used_), " already in use)"));
  }
  used_ = total;
  return absl::OkStatus();
}

void MemoryBudget::Release(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_ = std::max<int64_t>(0, used_ - std::max<int64_t>(bytes, 0));
}

int64_t MemoryBudget::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

}  // namespace quantd::calibration
