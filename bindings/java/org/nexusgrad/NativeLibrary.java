package org.nexusgrad;

/**
 * Loads the JNI library (libnexus_java.so, which finds libnexus.so through its RPATH). Set the
 * system property org.nexusgrad.library to an absolute path to load a specific file; otherwise
 * java.library.path is searched.
 */
final class NativeLibrary {
  private static boolean loaded;

  private NativeLibrary() {}

  static synchronized void load() {
    if (loaded) return;
    String path = System.getProperty("org.nexusgrad.library");
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else {
      System.loadLibrary("nexus_java");
    }
    loaded = true;
  }
}
