# BoringSSL from Debian's android-libboringssl-dev: headers in /usr/include/android/openssl, libraries in
# /usr/lib/<triplet>/android (not on the linker's search path, no pkg-config). Binaries get an rpath.
# OpenSSL's libssl-dev may sit beside it: the paths below never fall back to /usr/include/openssl, and
# tls/ code guards with #ifndef OPENSSL_IS_BORINGSSL #error. Targets: hd::boringssl_crypto, hd::boringssl_ssl
include(FindPackageHandleStandardArgs)
find_path(BoringSSL_INCLUDE_DIR NAMES openssl/is_boringssl.h PATHS /usr/include/android NO_DEFAULT_PATH)
find_library(BoringSSL_CRYPTO_LIBRARY NAMES libcrypto.so.0 crypto
             PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/android NO_DEFAULT_PATH)
find_library(BoringSSL_SSL_LIBRARY NAMES libssl.so.0 ssl
             PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/android NO_DEFAULT_PATH)
find_package_handle_standard_args(BoringSSL REQUIRED_VARS BoringSSL_SSL_LIBRARY BoringSSL_CRYPTO_LIBRARY
                                  BoringSSL_INCLUDE_DIR)
if(BoringSSL_FOUND AND NOT TARGET hd::boringssl_crypto)
  get_filename_component(BoringSSL_LIBRARY_DIR ${BoringSSL_CRYPTO_LIBRARY} DIRECTORY)
  add_library(hd::boringssl_crypto UNKNOWN IMPORTED GLOBAL)
  set_target_properties(hd::boringssl_crypto PROPERTIES IMPORTED_LOCATION "${BoringSSL_CRYPTO_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${BoringSSL_INCLUDE_DIR}"
                        INTERFACE_LINK_OPTIONS "LINKER:-rpath,${BoringSSL_LIBRARY_DIR}")
  add_library(hd::boringssl_ssl UNKNOWN IMPORTED GLOBAL)
  # libssl.so.0 is C++ inside: it needs libstdc++ at link time.
  set_target_properties(hd::boringssl_ssl PROPERTIES IMPORTED_LOCATION "${BoringSSL_SSL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${BoringSSL_INCLUDE_DIR}"
                        INTERFACE_LINK_LIBRARIES "hd::boringssl_crypto;stdc++")
endif()
