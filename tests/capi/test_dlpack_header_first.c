/* dlpack.h included BEFORE nexus.h (test_dlpack.c includes them the other way round): both
 * headers keep their own names, and the nx_dl_* structs have DLPack's layout. */
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#define NX_HAVE_DLPACK_H 1
#endif
#include "nx_test.h"
#include "dlpack_layout.h"

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_layout_matches_dlpack_h),
      NX_TEST(test_dlpack_h_structs_cross_with_a_cast),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
