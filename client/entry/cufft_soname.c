/* libtally_cufft.so: no code of its own. Its soname is libcufft.so.12 and its one dependency is
   the client (libcuda.so.1), so a dlopen("libcufft.so.12") answered with it, and a dlsym in that
   handle, reach the client's cuFFT forwarding (client/entry/library_sonames.cc). */
