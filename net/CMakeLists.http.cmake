# hd_net_http: HTTP/1.1 head parser, chunked body decoder and writers (pure code, no sockets).
# Included from net/CMakeLists.txt; paths are relative to this file so the includer's directory
# does not matter.
add_library(hd_net_http STATIC
  ${CMAKE_CURRENT_LIST_DIR}/http_chunked.c
  ${CMAKE_CURRENT_LIST_DIR}/http_parse.c
  ${CMAKE_CURRENT_LIST_DIR}/http_path.c
  ${CMAKE_CURRENT_LIST_DIR}/http_write.c)
# <hd/net_http.h>, <hd/http_limits.h> and <hd/hd_base.h> (HD_ASSERT; hd_assert_fail lives in reactor).
target_include_directories(hd_net_http PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                           $<INSTALL_INTERFACE:include>)
# SHA-1 and base64 for Sec-WebSocket-Accept.
target_link_libraries(hd_net_http PRIVATE hd::boringssl_crypto)
# hd_assert_fail
target_link_libraries(hd_net_http PUBLIC hd_reactor)
