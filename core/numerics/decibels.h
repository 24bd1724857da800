// The one signal-to-noise ratio in decibels every report uses.
#ifndef QUANTD_CORE_NUMERICS_DECIBELS_H_
#define QUANTD_CORE_NUMERICS_DECIBELS_H_

#include <cmath>
#include <limits>

namespace quantd::numerics {

// 10*log10(signal / noise) in dB, from summed energies. Exact (noise <= 0,
// whatever the signal): +infinity. No signal (signal <= 0 < noise):
// -infinity. NaN in: NaN out.
inline double SqnrDb(double signal, double noise) {
  if (std::isnan(signal) || std::isnan(noise)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (noise <= 0) return std::numeric_limits<double>::infinity();
  if (signal <= 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_DECIBELS_H_
