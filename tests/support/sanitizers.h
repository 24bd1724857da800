// Whether this build runs under a sanitizer, for tests whose bounds only
// hold with the real allocator.
#ifndef QUANTD_TESTS_SUPPORT_SANITIZERS_H_
#define QUANTD_TESTS_SUPPORT_SANITIZERS_H_

namespace quantd::testing {

// ASan keeps freed memory in its quarantine and neither it nor TSan gives
// pages back through malloc_trim, so "idle RSS returns to its baseline" is
// a property of glibc's allocator that a sanitized server cannot show. Every
// target of a sanitized build is compiled with the same -fsanitize flags, so
// the test's own macros tell about the server too.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_SANITIZERS_H_
