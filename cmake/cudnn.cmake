# cuDNN 9 (library and cudnn.h) and the cudnn-frontend headers, for the `cudnn`
# backend. Where they come from:
#   cuDNN:    CUDNN_ROOT (CMake or environment), the CUDA toolkit (Debian build
#             machines), or PyTorch's nvidia-cudnn package (the GPU machine).
#   frontend: CUDNN_FRONTEND_ROOT, else .deps/cudnn_frontend (scripts/setup.sh
#             unpacks the pinned PyPI wheel there), else .carry/include (device runs).
# Sets ATTN_HAVE_CUDNN and the imported target attn_cudnn_deps.
option(ATTN_WITH_CUDNN "Build the cudnn backend when cuDNN and cudnn-frontend are found" ON)
set(ATTN_HAVE_CUDNN OFF)
if(NOT ATTN_WITH_CUDNN)
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/find_nvidia_library.cmake)
attn_find_nvidia_library(CUDNN cudnn.h cudnn cudnn libcudnn.so.9)
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
          HINTS ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT} ${CMAKE_SOURCE_DIR}/.deps/cudnn_frontend
                ${CMAKE_SOURCE_DIR}/.carry
          PATH_SUFFIXES include NO_DEFAULT_PATH)

if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND CUDNN_FRONTEND_INCLUDE_DIR)
  set(ATTN_HAVE_CUDNN ON)
  add_library(attn_cudnn_deps INTERFACE IMPORTED)
  target_include_directories(attn_cudnn_deps INTERFACE ${CUDNN_INCLUDE_DIR})
  target_include_directories(attn_cudnn_deps SYSTEM INTERFACE ${CUDNN_FRONTEND_INCLUDE_DIR})
  # The frontend compiles some engines at run time (NVRTC).
  target_link_libraries(attn_cudnn_deps INTERFACE ${CUDNN_LIBRARY} CUDA::nvrtc)
  # No JSON serialization of graphs: attn never saves them, and it compiles faster.
  target_compile_definitions(attn_cudnn_deps INTERFACE CUDNN_FRONTEND_SKIP_JSON_LIB)
  message(STATUS "attn: cudnn backend: ${CUDNN_LIBRARY}, frontend ${CUDNN_FRONTEND_INCLUDE_DIR}")
else()
  message(STATUS "attn: cudnn backend not built (cudnn.h: ${CUDNN_INCLUDE_DIR}, libcudnn: ${CUDNN_LIBRARY}, "
                 "cudnn_frontend.h: ${CUDNN_FRONTEND_INCLUDE_DIR}); scripts/setup.sh installs the frontend")
endif()
