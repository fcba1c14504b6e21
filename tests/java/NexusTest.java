// The Java binding test (ctest -L java): exercises the generated API, closes every handle it gets
// (try-with-resources) and checks that nx_live_handle_count(NX_HANDLE_TENSOR) is back to 0 at the end.
import java.io.File;
import java.util.Arrays;
import org.nexusgrad.*;

public class NexusTest {
  static int checks = 0;

  static void check(boolean ok, String what) {
    ++checks;
    if (!ok) throw new AssertionError("FAILED: " + what);
  }

  static void close(double a, double b, String what) {
    check(Math.abs(a - b) <= 1e-5 * (1 + Math.abs(b)), what + ": " + a + " vs " + b);
  }

  public static void main(String[] args) throws Exception {
    Device cpu = Nexus.cpu();
    check(Nexus.abi_version() == Nexus.NX_ABI_VERSION, "ABI version");
    check(Nexus.version_string().startsWith(Nexus.NX_VERSION_MAJOR + "."), "version string");

    // settings: set_<name>(value) and get_<name>() (rule 3 of nexus.h)
    int threads = Nexus.cpu_get_num_threads();
    Nexus.cpu_set_num_threads(1);
    check(Nexus.cpu_get_num_threads() == 1, "cpu_get_num_threads");
    Nexus.cpu_set_num_threads(threads);
    check(Arrays.asList("avx512", "avx2", "scalar").contains(Nexus.cpu_get_simd_level()), "cpu_get_simd_level");
    Nexus.runtime_set_deterministic(true);
    check(Nexus.runtime_get_deterministic(), "runtime_get_deterministic");
    Nexus.runtime_set_deterministic(false);
    check(Nexus.autograd_get_enabled(), "grad mode on by default");

    // options structs come filled with their defaults (struct_size included)
    AdamOptions adamDefaults = new AdamOptions();
    check(adamDefaults.getStruct_size() > 0 && adamDefaults.getLr() == 1e-3 && adamDefaults.getBeta2() == 0.999
          && !adamDefaults.getDecoupled_weight_decay(), "AdamOptions defaults");
    check(new SgdOptions().getLr() == 1e-3 && !new BackwardOptions().getRetain_graph(), "options defaults");

    // quick start: gradient of sum(x @ w) is x^T @ ones
    Nexus.random_set_seed(7);
    try (Tensor x = Nexus.tensor(new float[] {1, 2, 3, 4, 5, 6, 7, 8}, new long[] {2, 4}, cpu);
         Tensor w = Nexus.tensor_randn(new long[] {4, 3}, DType.F32, cpu, null)) {
      w.setRequiresGrad(true);
      check(w.requiresGrad() && Nexus.tensor_is_leaf(w), "requires_grad leaf");
      try (Tensor y = Nexus.matmul(x, w, null); Tensor loss = Nexus.sum(y, null, false, null)) {
        check(Arrays.equals(y.shape(), new long[] {2, 3}), "matmul shape");
        check(!Nexus.tensor_is_leaf(y), "y has a grad_fn");
        BackwardOptions retain = new BackwardOptions();
        retain.setRetain_graph(true);
        Nexus.backward(loss, null, retain, null);
        Nexus.tensor_zero_grad(w);
        Nexus.backward(loss, null, null, null);
        try (Tensor g = w.grad()) {
          float[] gv = Nexus.toFloatArray(g);
          float[] expect = {6, 6, 6, 8, 8, 8, 10, 10, 10, 12, 12, 12};
          for (int i = 0; i < 12; ++i) close(gv[i], expect[i], "grad[" + i + "]");
        }
      }
      // errors: a NexusException with the status and the engine's message
      try (Tensor bad = Nexus.matmul(x, x, null)) {
        check(false, "matmul of [2,4] by [2,4] must fail");
      } catch (NexusException e) {
        check(e.status() == Status.ERR_SHAPE, "status ERR_SHAPE");
        check(e.getMessage().contains("nx_matmul: inner dimensions differ"), "message: " + e.getMessage());
      }
      try (Tensor r = Nexus.tensor_randn(new long[] {2}, DType.I32, cpu, null)) {
        check(false, "randn of int32 must fail");
      } catch (NexusException e) {
        check(e.status() == Status.ERR_DTYPE, "status ERR_DTYPE");
      }
      try {
        Nexus.tensor_from_data(new byte[3], new long[] {2}, DType.F32, cpu, null);
        check(false, "short buffer must be refused");
      } catch (IllegalArgumentException e) {
        check(true, "short buffer");
      }
    }

    // shapes, dtypes, reductions, views, arrays of tensors
    try (Tensor a = Nexus.tensor_arange(0, 12, 1, DType.F64, cpu, null);
         Tensor m = Nexus.reshape(a, new long[] {3, 4}, null);
         Tensor t = Nexus.transpose(m, 0, 1, null);
         Tensor s1 = Nexus.sum(m, new long[] {1}, false, null);
         Tensor mx = Nexus.max(m, new long[] {0}, true, null);
         Tensor am = Nexus.argmax(m, 1, false, null);
         Tensor sl = Nexus.slice(m, 1, 1, 3, 1, null)) {
      check(a.dtype() == DType.F64 && a.numel() == 12, "arange");
      check(Arrays.equals(Nexus.tensor_strides(t), new long[] {1, 4}), "transpose strides");
      check(!Nexus.tensor_is_contiguous(t), "transpose is a view");
      check(Arrays.equals(Nexus.toDoubleArray(s1), new double[] {6, 22, 38}), "sum axis 1");
      check(Arrays.equals(mx.shape(), new long[] {1, 4}), "max keepdim");
      check(Arrays.equals(Nexus.toDoubleArray(am), new double[] {3, 3, 3}), "argmax");
      check(Arrays.equals(Nexus.toDoubleArray(sl), new double[] {1, 2, 5, 6, 9, 10}), "slice");
      check(Nexus.tensor_device(a).getType() == DeviceType.CPU, "device");
      Tensor[] parts = Nexus.split(m, new long[] {1, 3}, 1, null);
      try (Tensor p0 = parts[0]; Tensor p1 = parts[1];
           Tensor c = Nexus.cat(new Tensor[] {p1, p0}, 1, null);
           Tensor st = Nexus.stack(new Tensor[] {m, m}, 0, null)) {
        check(Arrays.equals(p1.shape(), new long[] {3, 3}), "split");
        check(Arrays.equals(c.shape(), new long[] {3, 4}), "cat");
        check(Arrays.equals(st.shape(), new long[] {2, 3, 4}), "stack");
      }
      byte[] raw = new byte[12 * 8];
      Nexus.tensor_copy_to_host(m, raw, null);
      check(raw[15] == (byte) 0x3F && raw[14] == (byte) 0xF0, "copy_to_host (1.0 little-endian at index 1)");
    }

    // autograd_grad, create_graph, no-grad mode
    try (Tensor x = Nexus.tensor(new double[] {1, 2, 3}, new long[] {3}, cpu)) {
      x.setRequiresGrad(true);
      try (Tensor c = Nexus.pow_scalar(x, 3, null); Tensor l = Nexus.sum(c, null, false, null)) {
        try (Tensor jv = Nexus.jvp(l, new Tensor[] {x}, new Tensor[] {x}, null)) {  // sum(3 x^2 * x)
          close(Nexus.toDoubleArray(jv)[0], 3 * (1 + 8 + 27), "jvp");
        }
        try {
          Nexus.jvp(l, new Tensor[] {x}, new Tensor[] {x, x}, null);
          check(false, "jvp with 1 input and 2 tangents must be refused");
        } catch (IllegalArgumentException e) {
          check(e.getMessage().contains("differ in length"), "jvp lengths");
        }
        Tensor[] g = Nexus.autograd_grad(l, null, new Tensor[] {x}, null, null);
        try (Tensor g0 = g[0]) {
          check(Arrays.equals(Nexus.toDoubleArray(g0), new double[] {3, 12, 27}), "autograd_grad");
        }
      }
      Nexus.autograd_set_enabled(false);
      check(!Nexus.autograd_get_enabled(), "autograd_get_enabled");
      try (Tensor y = Nexus.mul_scalar(x, 2, null)) {
        check(!y.requiresGrad(), "no-grad mode");
      }
      Nexus.autograd_set_enabled(true);
    }

    // SafeTensors round trip
    File f = File.createTempFile("nexus", ".safetensors");
    f.deleteOnExit();
    try (Tensor a = Nexus.tensor(new float[] {1, 2, 3}, new long[] {3}, cpu);
         Tensor b = Nexus.tensor_ones(new long[] {2, 2}, DType.F64, cpu, null)) {
      Nexus.safetensors_save(f.getPath(), new String[] {"a", "b"}, new Tensor[] {a, b});
      try (SafeTensors st = Nexus.safetensors_open(f.getPath()); Tensor a2 = Nexus.safetensors_get(st, "a", cpu, null)) {
        check(Nexus.safetensors_count(st) == 2, "safetensors count");
        check(Nexus.safetensors_name(st, 0).equals("a"), "safetensors name");
        check(Arrays.equals(Nexus.toFloatArray(a2), new float[] {1, 2, 3}), "safetensors values");
        check(Nexus.safetensors_metadata(st, "none") == null, "missing metadata is null");
      }
    }
    try (SafeTensors st = Nexus.safetensors_open("/nonexistent.safetensors")) {
      check(false, "opening a missing file must fail");
    } catch (NexusException e) {
      check(e.status() == Status.ERR_IO, "status ERR_IO");
    }

    // a module, its parameters and an optimizer step
    try (Layer lin = Nexus.linear_create(4, 2, true, DType.F32, cpu, null);
         Tensor in = Nexus.tensor_ones(new long[] {3, 4}, DType.F32, cpu, null);
         Tensor out = Nexus.module_forward(lin, in, null);
         Tensor loss = Nexus.mean(out, null, false, null)) {
      check(Nexus.module_kind(lin).equals("Linear"), "module kind " + Nexus.module_kind(lin));
      check(Arrays.equals(out.shape(), new long[] {3, 2}), "linear forward");
      check(Nexus.module_parameter_count(lin) == 2, "parameter count");
      String[] name = new String[1];
      try (Tensor p0 = Nexus.module_parameter(lin, 0, name)) {
        check(name[0] != null && !name[0].isEmpty(), "parameter name");
      }
      check(Nexus.module_get_training(lin), "training mode by default");
      Nexus.module_set_training(lin, false);
      check(!Nexus.module_get_training(lin), "module_set_training");
      Tensor[] params = Nexus.module_parameters(lin);
      Nexus.backward(loss, null, null, null);
      SgdOptions sgd = new SgdOptions();
      sgd.setLr(0.1);
      try (Optimizer opt = Nexus.sgd_create(params, sgd)) {
        double before = Nexus.toDoubleArray(params[0])[0];
        Nexus.optimizer_step(opt, null);
        check(Nexus.toDoubleArray(params[0])[0] != before, "sgd step changes the weight");
        close(Nexus.optimizer_get_lr(opt), 0.1, "lr");
        double norm = Nexus.clip_grad_norm(params, 1.0, null);
        check(norm > 0, "clip_grad_norm returns the norm");
      }
      for (Tensor p : params) p.close();
    }

    // a gradient scaler iteration: scale, backward, step (returns whether it stepped), update
    try (Tensor w = Nexus.tensor(new double[] {1, 2}, new long[] {2}, cpu)) {
      Nexus.tensor_set_requires_grad(w, true);
      GradScalerOptions so = new GradScalerOptions();
      so.setInit_scale(8);
      so.setGrowth_interval(1);
      try (GradScaler scaler = Nexus.grad_scaler_create(so);
           Optimizer opt = Nexus.sgd_create(new Tensor[] {w}, null);
           Tensor loss = Nexus.sum(w, null, false, null);
           Tensor scaled = Nexus.grad_scaler_scale(scaler, loss, null)) {
        close(scaled.item(), 24, "scaled loss");
        Nexus.backward(scaled, null, null, null);
        Nexus.grad_scaler_unscale(scaler, opt, null);
        try (Tensor g = w.grad()) {
          close(Nexus.toDoubleArray(g)[0], 1, "unscaled gradient");
        }
        try {
          Nexus.grad_scaler_unscale(scaler, opt, null);
          check(false, "a second unscale must fail");
        } catch (NexusException e) {
          check(e.status() == Status.ERR_STATE, "status ERR_STATE");
        }
        check(Nexus.grad_scaler_step(scaler, opt, null), "a clean step steps");
        Nexus.grad_scaler_update(scaler);
        close(Nexus.grad_scaler_get_scale(scaler), 16, "the scale grows after growth_interval clean steps");
      }
    }

    // nx_adam_step_multi: four arrays of one length and an options struct (null: the defaults)
    try (Tensor p = Nexus.tensor(new double[] {1, 1}, new long[] {2}, cpu);
         Tensor g = Nexus.tensor(new double[] {0.5, 0.5}, new long[] {2}, cpu);
         Tensor m = Nexus.tensor_zeros(new long[] {2}, DType.F64, cpu, null);
         Tensor v = Nexus.tensor_zeros(new long[] {2}, DType.F64, cpu, null)) {
      Tensor[] ps = {p}, gs = {g}, ms = {m}, vs = {v};
      Nexus.adam_step_multi(ps, gs, ms, vs, 1, null, null);
      close(Nexus.toDoubleArray(p)[0], 1 - 1e-3, "adam step with the default lr");
      AdamOptions adam = new AdamOptions();
      adam.setLr(0.5);
      Nexus.adam_step_multi(ps, gs, ms, vs, 2, adam, null);
      close(Nexus.toDoubleArray(p)[0], 1 - 1e-3 - 0.5, "adam step with lr 0.5");
      try {
        Nexus.adam_step_multi(ps, new Tensor[] {g, g}, ms, vs, 3, null, null);
        check(false, "arrays of different lengths must be refused");
      } catch (IllegalArgumentException e) {
        check(e.getMessage().contains("differ in length"), "adam_step_multi lengths: " + e.getMessage());
      }
      adam.setStruct_size(4);
      try {
        Nexus.adam_step_multi(ps, gs, ms, vs, 3, adam, null);
        check(false, "a struct_size of 4 must be refused");
      } catch (NexusException e) {
        check(e.status() == Status.ERR_INVALID_ARGUMENT && e.getMessage().contains("struct_size is 4"),
              "struct_size check: " + e.getMessage());
      }
    }

    // printing: toString() is nx_tensor_to_string (PyTorch's str() layout); the C string is freed
    try (Tensor p = Nexus.tensor(new float[] {1, 2, 3, 4.5f}, new long[] {2, 2}, cpu);
         Tensor q = Nexus.tensor(new long[] {5, -10}, new long[] {2}, cpu)) {
      check(p.toString().equals("tensor([[1.0000, 2.0000],\n        [3.0000, 4.5000]])"), "toString: " + p);
      check(q.toString().equals("tensor([  5, -10])"), "toString of int64: " + q);
      PrintOptions po = new PrintOptions();
      check(po.getPrecision() == 4 && po.getThreshold() == 1000 && po.getSci_mode() == PrintSciMode.PRINT_SCI_AUTO,
            "PrintOptions defaults");
      po.setPrecision(1);
      po.setSci_mode(PrintSciMode.PRINT_SCI_ALWAYS);
      check(Nexus.tensor_to_string(p, po).equals("tensor([[1.0e+00, 2.0e+00],\n        [3.0e+00, 4.5e+00]])"),
            "tensor_to_string with options: " + Nexus.tensor_to_string(p, po));
      po.setPrecision(-1);
      try {
        Nexus.tensor_to_string(p, po);
        check(false, "a negative precision must be refused");
      } catch (NexusException e) {
        check(e.status() == Status.ERR_INVALID_ARGUMENT
              && e.getMessage().contains("nx_tensor_to_string: options->precision is -1"), "precision check: " + e.getMessage());
      }
      p.close();
      check(p.toString().equals("Tensor(closed)"), "toString of a closed tensor");
    }

    // text
    try (Tokenizer tok = Nexus.tokenizer_bytes_create(); Tensor ids = Nexus.tokenizer_encode(tok, "héllo")) {
      check(Nexus.tokenizer_vocab_size(tok) == 256, "byte vocab");
      long[] v = new long[(int) ids.numel()];
      double[] d = Nexus.toDoubleArray(ids);
      for (int i = 0; i < v.length; ++i) v[i] = (long) d[i];
      check(Nexus.tokenizer_decode(tok, v).equals("héllo"), "decode(encode(s)) == s");
    }

    // a fused op with two outputs: residual add + RMSNorm gives {norm(x + r), x + r}
    try (Tensor x = Nexus.tensor(new double[] {1, 2, 3, 4}, new long[] {2, 2}, cpu);
         Tensor r = Nexus.tensor(new double[] {0.5, -1, 2, 0}, new long[] {2, 2}, cpu)) {
      Tensor[] both = Nexus.add_rms_norm(x, r, null, 1e-6, null);
      try (Tensor out = both[0]; Tensor sum = both[1]; Tensor ref = Nexus.rms_norm(sum, null, 1e-6, null)) {
        check(Arrays.equals(Nexus.toDoubleArray(sum), new double[] {1.5, 1, 5, 4}), "add_rms_norm sum");
        double[] o = Nexus.toDoubleArray(out), e = Nexus.toDoubleArray(ref);
        for (int i = 0; i < 4; ++i) close(o[i], e[i], "add_rms_norm out " + i);
        close(o[0], 1.5 / Math.sqrt((1.5 * 1.5 + 1) / 2 + 1e-6), "add_rms_norm out 0 by hand");
      }
    }

    // communicator ids: hex round trip; a bad rank is refused before any GPU is needed
    CommId id = new CommId();
    String hex = "5a".repeat(Nexus.NX_COMM_ID_BYTES);
    Nexus.comm_id_from_hex(id, hex);
    check(Nexus.comm_id_to_hex(id).equals(hex), "comm id hex round trip");
    try (Comm c = Nexus.comm_create(id, 2, 2, new Device(DeviceType.CUDA, 0))) {
      check(false, "rank 2 of 2 must fail");
    } catch (NexusException e) {
      check(e.status() == Status.ERR_INVALID_ARGUMENT && e.getMessage().contains("rank 2 is outside [0, 2)"),
            "comm_create rank check: " + e.getMessage());
    }

    // closing twice is harmless; a closed handle is reported, not dereferenced
    Tensor z = Nexus.tensor_zeros(new long[] {2}, DType.F32, cpu, null);
    z.close();
    z.close();
    check(z.isClosed(), "closed");

    System.gc();
    long live = Nexus.live_handle_count(HandleType.HANDLE_TENSOR);
    check(live == 0, "every handle closed: live tensors = " + live);
    System.out.println("NexusTest: " + checks + " checks passed, live tensors at exit: " + live);
  }
}
