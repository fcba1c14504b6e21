/* nexus.h's nx_dl_* structs against DLPack's own dlpack.h (Debian: libdlpack-dev, DLPack 0.6; a
 * DLPack 1.x header also gets its versioned struct compared), shared by test_dlpack.c (nexus.h
 * included first) and test_dlpack_header_first.c (dlpack.h first). The including file defines
 * NX_HAVE_DLPACK_H when it found and included dlpack.h; without it both tests are skipped with a
 * message. */
#ifndef NX_DLPACK_LAYOUT_H
#define NX_DLPACK_LAYOUT_H

#define NX_NO_DLPACK_H()                                                                             \
  do {                                                                                               \
    print_message("dlpack/dlpack.h not found (Debian: libdlpack-dev, installed by scripts/deps.sh): " \
                  "skipped\n");                                                                      \
    skip();                                                                                          \
  } while (0)

#ifdef NX_HAVE_DLPACK_H
/* The same size, and every field at the same offset with the same size. */
#define SAME_SIZE(ours, theirs) assert_int_equal(sizeof(ours), sizeof(theirs))
#define SAME_FIELD(ours, theirs, field)                                      \
  do {                                                                       \
    assert_int_equal(offsetof(ours, field), offsetof(theirs, field));        \
    assert_int_equal(sizeof(((ours*)0)->field), sizeof(((theirs*)0)->field)); \
  } while (0)
#if defined(DLPACK_MAJOR_VERSION) || (defined(DLPACK_VERSION) && DLPACK_VERSION >= 80)
#define NX_DLPACK_H_HAS_BOOL 1 /* kDLBool came with DLPack 0.8 */
#endif
#endif

static void test_layout_matches_dlpack_h(void** state) {
  (void)state;
#ifndef NX_HAVE_DLPACK_H
  NX_NO_DLPACK_H();
#else
  SAME_SIZE(nx_dl_device, DLDevice);
  SAME_FIELD(nx_dl_device, DLDevice, device_type);
  SAME_FIELD(nx_dl_device, DLDevice, device_id);
  SAME_SIZE(nx_dl_data_type, DLDataType);
  SAME_FIELD(nx_dl_data_type, DLDataType, code);
  SAME_FIELD(nx_dl_data_type, DLDataType, bits);
  SAME_FIELD(nx_dl_data_type, DLDataType, lanes);
  SAME_SIZE(nx_dl_tensor, DLTensor);
  SAME_FIELD(nx_dl_tensor, DLTensor, data);
  SAME_FIELD(nx_dl_tensor, DLTensor, device);
  SAME_FIELD(nx_dl_tensor, DLTensor, ndim);
  SAME_FIELD(nx_dl_tensor, DLTensor, dtype);
  SAME_FIELD(nx_dl_tensor, DLTensor, shape);
  SAME_FIELD(nx_dl_tensor, DLTensor, strides);
  SAME_FIELD(nx_dl_tensor, DLTensor, byte_offset);
  SAME_SIZE(nx_dl_managed_tensor, DLManagedTensor);
  SAME_FIELD(nx_dl_managed_tensor, DLManagedTensor, dl_tensor);
  SAME_FIELD(nx_dl_managed_tensor, DLManagedTensor, manager_ctx);
  SAME_FIELD(nx_dl_managed_tensor, DLManagedTensor, deleter);
  /* the codes nexus.h names */
  assert_int_equal(NX_CPU, kDLCPU);
  assert_int_equal(NX_CUDA, kDLCUDA);
  assert_int_equal(NX_DL_INT, kDLInt);
  assert_int_equal(NX_DL_UINT, kDLUInt);
  assert_int_equal(NX_DL_FLOAT, kDLFloat);
  assert_int_equal(NX_DL_OPAQUE_HANDLE, kDLOpaqueHandle);
  assert_int_equal(NX_DL_BFLOAT, kDLBfloat);
  assert_int_equal(NX_DL_COMPLEX, kDLComplex);
#ifdef NX_DLPACK_H_HAS_BOOL
  assert_int_equal(NX_DL_BOOL, kDLBool);
#endif
#ifdef DLPACK_MAJOR_VERSION /* DLPack 1.x: the versioned struct too */
  SAME_SIZE(nx_dl_version, DLPackVersion);
  SAME_FIELD(nx_dl_version, DLPackVersion, major);
  SAME_FIELD(nx_dl_version, DLPackVersion, minor);
  SAME_SIZE(nx_dl_managed_tensor_versioned, DLManagedTensorVersioned);
  SAME_FIELD(nx_dl_managed_tensor_versioned, DLManagedTensorVersioned, version);
  SAME_FIELD(nx_dl_managed_tensor_versioned, DLManagedTensorVersioned, manager_ctx);
  SAME_FIELD(nx_dl_managed_tensor_versioned, DLManagedTensorVersioned, deleter);
  SAME_FIELD(nx_dl_managed_tensor_versioned, DLManagedTensorVersioned, flags);
  SAME_FIELD(nx_dl_managed_tensor_versioned, DLManagedTensorVersioned, dl_tensor);
  assert_int_equal(NX_DL_MAJOR_VERSION, DLPACK_MAJOR_VERSION);
  assert_int_equal(NX_DL_FLAG_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
  assert_int_equal(NX_DL_FLAG_IS_COPIED, DLPACK_FLAG_BITMASK_IS_COPIED);
#else
  print_message("dlpack.h is DLPack %d (before 1.0): the versioned struct is checked against DLPack 1.x "
                "by the offsets in src/capi/dlpack_api.cpp\n", (int)DLPACK_VERSION);
#endif
#endif
}

/* A 1-d f64 CPU tensor of shape[0] elements at data (compact: strides NULL). */
NX_UNUSED static void describe_f64_vector(nx_dl_tensor* dl, double* data, int64_t* shape) {
  memset(dl, 0, sizeof *dl);
  dl->data = data;
  dl->device.device_type = NX_CPU;
  dl->ndim = 1;
  dl->dtype.code = NX_DL_FLOAT;
  dl->dtype.bits = 64;
  dl->dtype.lanes = 1;
  dl->shape = shape;
}

#ifdef NX_HAVE_DLPACK_H
static int g_theirs_deleted;
static void their_deleter(DLManagedTensor* self) {
  (void)self;
  ++g_theirs_deleted;
}
#endif

/* A program that uses DLPack's names passes its structs to nexus.h with a cast, both ways. */
static void test_dlpack_h_structs_cross_with_a_cast(void** state) {
  (void)state;
#ifndef NX_HAVE_DLPACK_H
  NX_NO_DLPACK_H();
#else
  const double vals[6] = {0, 1, 2, 3, 4, 5};
  const int64_t shape[2] = {2, 3};
  nx_tensor t = make_tensor(vals, shape, 2, NX_F64);
  nx_dl_managed_tensor* ours = NULL;
  NX_OK_(nx_tensor_to_dlpack(&ours, t));
  DLManagedTensor* m = (DLManagedTensor*)ours; /* read through DLPack's names */
  assert_int_equal(m->dl_tensor.device.device_type, kDLCPU);
  assert_int_equal(m->dl_tensor.ndim, 2);
  assert_int_equal(m->dl_tensor.shape[1], 3);
  assert_int_equal(m->dl_tensor.strides[0], 3);
  assert_int_equal(m->dl_tensor.dtype.code, kDLFloat);
  assert_int_equal(m->dl_tensor.dtype.bits, 64);
  assert_true(((const double*)m->dl_tensor.data)[4] == 4.0);
  m->deleter(m);

  /* a DLManagedTensor of "another library" (here), described through nexus.h's struct and read
   * back through DLPack's names, then imported without a copy */
  double theirs[3] = {7, 8, 9};
  int64_t their_shape[1] = {3};
  DLManagedTensor dm;
  memset(&dm, 0, sizeof dm);
  nx_dl_tensor described;
  describe_f64_vector(&described, theirs, their_shape);
  /* bytes, not a cast: reading one struct type through a pointer to the other breaks C's
   * aliasing rules, and at -O2 the reads below would see the memset's zeros */
  memcpy(&dm.dl_tensor, &described, sizeof described);
  assert_true(dm.dl_tensor.data == theirs && dm.dl_tensor.device.device_type == kDLCPU && dm.dl_tensor.ndim == 1);
  assert_true(dm.dl_tensor.dtype.code == kDLFloat && dm.dl_tensor.dtype.bits == 64 && dm.dl_tensor.dtype.lanes == 1);
  assert_true(dm.dl_tensor.shape == their_shape && dm.dl_tensor.strides == NULL && dm.dl_tensor.byte_offset == 0);
  dm.deleter = their_deleter;
  g_theirs_deleted = 0;
  nx_tensor u = NULL;
  NX_OK_(nx_tensor_from_dlpack(&u, (nx_dl_managed_tensor*)&dm));
  double back[3];
  read_f64(u, back, 3);
  assert_true(back[0] == 7 && back[2] == 9);
  theirs[1] = -8; /* shared memory */
  read_f64(u, back, 3);
  assert_true(back[1] == -8);
  assert_int_equal(g_theirs_deleted, 0);
  nx_tensor_free(u);
  assert_int_equal(g_theirs_deleted, 1);
  nx_tensor_free(t);
#endif
}

#endif
