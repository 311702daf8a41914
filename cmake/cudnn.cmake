# cuDNN 9 (library and cudnn.h) and the cudnn-frontend headers, for the `cudnn`
# backend. Where they come from:
#   cuDNN:    CUDNN_ROOT (CMake or environment), the CUDA toolkit (Debian build
#             machines), or PyTorch's nvidia-cudnn package (the GPU machine).
#   frontend: CUDNN_FRONTEND_ROOT, else .deps/cudnn_frontend (scripts/setup.sh
#             unpacks the pinned PyPI wheel there), else .carry/include (device
#             runs), else the building Python's site-packages/include, where
#             `pip install .` puts pyproject.toml's pinned build requirement
#             nvidia-cudnn-frontend.
# Paths are attn's own (PROJECT_SOURCE_DIR), so add_subdirectory finds them too.
# Sets ATTN_HAVE_CUDNN, ATTN_CUDNN_WHY (why it is left out, for the summary) and
# the imported target attn::cudnn_deps. The frontend's headers are build-time
# only: attn's objects link cuDNN, no installed header includes them.
option(ATTN_WITH_CUDNN "Build the cudnn backend when cuDNN and cudnn-frontend are found" ON)
set(ATTN_HAVE_CUDNN OFF)
if(NOT ATTN_WITH_CUDNN)
  set(ATTN_CUDNN_WHY "ATTN_WITH_CUDNN=OFF")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/find_nvidia_library.cmake)
attn_find_nvidia_library(CUDNN cudnn.h cudnn cudnn libcudnn.so.9)
set(_attn_python_site "")
if(DEFINED Python_EXECUTABLE)  # scikit-build-core passes the interpreter it builds for
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE _attn_python_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
          HINTS ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT} ${PROJECT_SOURCE_DIR}/.deps/cudnn_frontend
                ${PROJECT_SOURCE_DIR}/.carry ${_attn_python_site}
          PATH_SUFFIXES include NO_DEFAULT_PATH)

if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND CUDNN_FRONTEND_INCLUDE_DIR)
  set(ATTN_HAVE_CUDNN ON)
  add_library(attn::cudnn_deps INTERFACE IMPORTED)
  target_include_directories(attn::cudnn_deps INTERFACE ${CUDNN_INCLUDE_DIR})
  target_include_directories(attn::cudnn_deps SYSTEM INTERFACE ${CUDNN_FRONTEND_INCLUDE_DIR})
  # The frontend compiles some engines at run time (NVRTC).
  target_link_libraries(attn::cudnn_deps INTERFACE ${CUDNN_LIBRARY} CUDA::nvrtc)
  # No JSON serialization of graphs: attn never saves them, and it compiles faster.
  target_compile_definitions(attn::cudnn_deps INTERFACE CUDNN_FRONTEND_SKIP_JSON_LIB)
elseif(NOT CUDNN_FRONTEND_INCLUDE_DIR)
  set(ATTN_CUDNN_WHY "cudnn-frontend headers not found (run scripts/setup.sh, pip install nvidia-cudnn-frontend==1.32.0 into the building Python, or pass -DCUDNN_FRONTEND_ROOT=...)")
elseif(NOT CUDNN_INCLUDE_DIR)
  set(ATTN_CUDNN_WHY "cudnn.h not found (install cuDNN 9 or pass -DCUDNN_ROOT=...)")
else()
  set(ATTN_CUDNN_WHY "libcudnn not found beside ${CUDNN_INCLUDE_DIR} (pass -DCUDNN_ROOT=...)")
endif()
