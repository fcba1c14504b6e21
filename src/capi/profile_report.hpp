// What a stopped profile (core/profiler.hpp) becomes for a person: the summary table of
// nx_profile_summary and the Chrome trace of nx_profile_save_chrome_trace.
#pragma once
#include <string>

#include "core/profiler.hpp"

namespace nx::profiler {

enum class Sort { Total = 0, Self = 1, Device = 2, Calls = 3 };  // nx_profile_sort
std::string summary(const Profile& p, Sort sort, int64_t row_limit);
std::string chrome_trace(const Profile& p);

}  // namespace nx::profiler
