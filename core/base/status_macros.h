// Early returns of a failed absl::Status or absl::StatusOr, so a function
// reads as its steps rather than as the error plumbing between them.
#ifndef QUANTD_CORE_BASE_STATUS_MACROS_H_
#define QUANTD_CORE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status of `expr` (an absl::Status or absl::StatusOr) from the
// enclosing function when it is not OK.
#define QUANTD_RETURN_IF_ERROR(expr)                              \
  do {                                                            \
    if (auto quantd_status_ = ::quantd::internal::StatusOf(expr); \
        !quantd_status_.ok()) {                                   \
      return quantd_status_;                                      \
    }                                                             \
  } while (false)

// `lhs = value of rexpr` (an absl::StatusOr), or returns its status from the
// enclosing function. `lhs` may declare a variable: `auto x`, `Tensor t`.
#define QUANTD_ASSIGN_OR_RETURN(lhs, rexpr) \
  QUANTD_ASSIGN_OR_RETURN_IMPL_(            \
      QUANTD_STATUS_CONCAT_(quantd_statusor_, __LINE__), lhs, rexpr)

#define QUANTD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#define QUANTD_STATUS_CONCAT_INNER_(a, b) a##b
#define QUANTD_STATUS_CONCAT_(a, b) QUANTD_STATUS_CONCAT_INNER_(a, b)

namespace quantd::internal {

inline absl::Status StatusOf(absl::Status s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace quantd::internal

#endif  // QUANTD_CORE_BASE_STATUS_MACROS_H_
