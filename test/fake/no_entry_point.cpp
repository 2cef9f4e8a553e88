// A shared library that is not a CUDA driver: it has no cuGetProcAddress_v2.
extern "C" __attribute__((visibility("default"))) int custream_fake_not_a_driver() { return 0; }
