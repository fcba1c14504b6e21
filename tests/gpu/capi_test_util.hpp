// Helpers for the GPU tests written against the C API (nexus.h only).
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "nexus.h"

#define OK(call) ASSERT_EQ((call), NX_OK) << nx_last_error_message()

// The f32 elements of t, from any device.
inline std::vector<float> host(nx_tensor t) {
  int64_t n = 0;
  EXPECT_EQ(nx_tensor_numel(t, &n), NX_OK);
  std::vector<float> v(static_cast<size_t>(n));
  EXPECT_EQ(nx_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float), nullptr), NX_OK) << nx_last_error_message();
  return v;
}
