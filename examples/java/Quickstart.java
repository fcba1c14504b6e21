// NexusGrad from Java: the C quick start (examples/c/quickstart.c) through the SWIG bindings.
//
//   cmake -S . -B build -DNEXUS_JAVA=ON && cmake --build build
//   javac -cp build/java/nexusgrad.jar -d /tmp/qs examples/java/Quickstart.java
//   java -Djava.library.path=build/java -cp build/java/nexusgrad.jar:/tmp/qs Quickstart
import java.util.Arrays;
import org.nexusgrad.*;

public class Quickstart {
  public static void main(String[] args) {
    Device cpu = Nexus.cpu();
    Nexus.random_set_seed(42);
    try (Tensor x = Nexus.tensor_randn(new long[] {2, 4}, DType.F32, cpu, null);
         Tensor w = Nexus.tensor_randn(new long[] {4, 3}, DType.F32, cpu, null)) {
      w.setRequiresGrad(true);
      try (Tensor y = Nexus.matmul(x, w, null);
           Tensor loss = Nexus.sum(y, null, false, null)) {  // null axes: all axes
        Nexus.backward(loss, null, null, null);   // null options: the defaults
        try (Tensor grad = w.grad()) {                         // d loss / d w, shape [4, 3]
          System.out.println("loss = " + loss.item());
          System.out.println("grad " + Arrays.toString(grad.shape()) + " = "
                             + Arrays.toString(Nexus.toFloatArray(grad)));
        }
      }
      try (Tensor bad = Nexus.matmul(x, x, null)) {
        System.out.println("unexpected: " + bad);
      } catch (NexusException e) {                             // Status.ERR_SHAPE
        System.out.println(e.status() + ": " + e.getMessage());
      }
    }
    System.out.println("live tensors: " + Nexus.live_handle_count(HandleType.HANDLE_TENSOR));
  }
}
