/* The shared library is nexus_core linked whole; this file only gives it a source. */
typedef int nexus_export_translation_unit;
